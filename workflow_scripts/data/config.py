"""Typed, frozen configuration objects built from validated config slices.

``build(cls, data, where)`` turns a nested dict into a nested frozen dataclass,
checking that every key is known and present and that every value has the
declared type, so a misspelt key fails with its full dotted name instead of
being silently ignored.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, TypeVar

from workflow_scripts.errors import UserInputError

T = TypeVar("T")


def _convert(hint: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(hint)
    if dataclasses.is_dataclass(hint):
        return build(hint, value, where)
    if origin is tuple:
        (item,) = {arg for arg in typing.get_args(hint) if arg is not Ellipsis}
        if not isinstance(value, list | tuple):
            raise UserInputError(f"{where}: expected a list, found {value!r}")
        return tuple(_convert(item, element, f"{where}[{index}]") for index, element in enumerate(value))
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        if value is None and type(None) in args:
            return None
        (inner,) = [arg for arg in args if arg is not type(None)]
        return _convert(inner, value, where)
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise UserInputError(f"{where}: expected a number, found {value!r}")
        return float(value)
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise UserInputError(f"{where}: expected an integer, found {value!r}")
        return value
    if hint is str:
        if not isinstance(value, str):
            raise UserInputError(f"{where}: expected a string, found {value!r}")
        return value
    raise TypeError(f"unsupported config type {hint!r} at {where}")


def build(cls: type[T], data: Any, where: str) -> T:
    """Build dataclass ``cls`` from mapping ``data``; ``where`` is the dotted key path for messages."""
    if not isinstance(data, dict):
        raise UserInputError(f"{where}: expected a mapping, found {data!r}")
    hints = typing.get_type_hints(cls)
    names = [field.name for field in dataclasses.fields(cls)]
    unknown = sorted(set(data) - set(names))
    if unknown:
        raise UserInputError(f"{where}: unknown key '{unknown[0]}' (expected {names})")
    missing = [name for name in names if name not in data]
    if missing:
        raise UserInputError(f"{where}: missing key '{missing[0]}'")
    return cls(**{name: _convert(hints[name], data[name], f"{where}.{name}") for name in names})
