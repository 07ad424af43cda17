"""Which schema keys the workflow reads, found statically in its code (``tests/test_registry_reads.py``).

A key counts as read where its name is used as a key in the workflow's code (a subscript, a
``.get``, an ``in`` test, a tuple of key names handed to a slice, or a field of a dataclass
mirroring its schema object) in the same unit (a top-level statement, a method, a rule) as
the name of the object holding it, so that ``datasets.*.name`` is not read merely because
``models.*.name`` is. Module-level constants a unit names count as part of it, a constant that
is a key name (``REHEARSAL = "rehearsal"``) as that key.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ANY = "*"  # an id-keyed entry of a section, or an item of a list
# The variable or argument a registry object is held in where a command reads it, when the
# command receives the object itself (a JSON slice) rather than the config above it.
HOLDER_NAMES = {
    "tables": ("entry",),  # report/table.py, provenance/cli.py: one table's or figure's entry
    "figures": ("entry",),
    "cells": ("cells",),  # registry.cells_closure: the cells of a table, a figure or the rehearsal
    "toy_base": ("pretrain",),  # models/cli.py: --pretrain
    "training": ("training",),  # train/cli.py: --training
    "sandbox": ("sandbox", "limits"),  # evaluate/cli.py: --limits
    "evaluation": ("evaluation",),  # dag_inputs: generate_options, sandbox_limits
}


@dataclass(frozen=True)
class Unit:
    """One top-level statement, method or rule: the key names it uses, and the names it mentions."""

    keys: frozenset[str]
    names: frozenset[str]


@dataclass(frozen=True)
class Code:
    """The workflow's code as units, and the field sets of its dataclasses."""

    units: list[Unit]
    dataclasses: list[set[str]]


def schema_paths(schema: dict[str, Any]) -> list[tuple[str, ...]]:
    """Every key path the schema allows, ids and list items as ``*``."""
    paths: list[tuple[str, ...]] = []

    def walk(node: Any, path: tuple[str, ...]) -> None:
        if not isinstance(node, dict):
            return
        if "$ref" in node:
            walk(schema["$defs"][node["$ref"].rsplit("/", 1)[-1]], path)
        for key, child in node.get("properties", {}).items():
            paths.append((*path, key))
            walk(child, (*path, key))
        for child in node.get("patternProperties", {}).values():
            walk(child, (*path, ANY))
        if isinstance(node.get("additionalProperties"), dict):
            walk(node["additionalProperties"], (*path, ANY))
        if isinstance(node.get("items"), dict):
            walk(node["items"], (*path, ANY))
        for alternative in ("oneOf", "anyOf", "allOf"):
            for child in node.get(alternative, []):
                walk(child, path)

    walk(schema, ())
    return paths


def sibling_keys(schema: dict[str, Any]) -> dict[tuple[str, ...], set[str]]:
    """The keys of the schema object holding each path."""
    siblings: dict[tuple[str, ...], set[str]] = {}
    for path in schema_paths(schema):
        siblings.setdefault(path[:-1], set()).add(path[-1])
    return siblings


def _key_names(node: ast.AST) -> Iterator[str]:
    """String constants used as keys below ``node``: subscripts, ``.get``, ``in`` tests, key tuples."""
    for child in ast.walk(node):
        if isinstance(child, ast.Subscript):
            yield from _strings(child.slice)
        elif isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute):
            if child.func.attr in ("get", "pop", "setdefault") and child.args:
                yield from _strings(child.args[0])
        elif isinstance(child, ast.Compare) and any(isinstance(op, ast.In | ast.NotIn) for op in child.ops):
            yield from _strings(child.left)
        elif isinstance(child, ast.Tuple | ast.List | ast.Set):
            for element in child.elts:
                yield from _strings(element)
        elif isinstance(child, ast.Dict):  # a mapping of sections to the key names read of each
            for key, value in zip(child.keys, child.values, strict=True):
                if key is not None and isinstance(value, ast.Tuple | ast.List):
                    yield from _strings(key)


def _strings(node: ast.AST) -> Iterator[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield node.value


def _names(node: ast.AST) -> set[str]:
    names = {child.id for child in ast.walk(node) if isinstance(child, ast.Name)}
    return names | {child.attr for child in ast.walk(node) if isinstance(child, ast.Attribute)}


def _python_units(tree: ast.Module) -> Iterator[ast.AST]:
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            yield from node.body
        else:
            yield node


def _is_dataclass(node: ast.ClassDef) -> bool:
    return any("dataclass" in ast.unparse(decorator) for decorator in node.decorator_list)


def read_code(root: Path) -> Code:
    """The units of ``workflow_scripts`` (its schema aside), the rules and the Snakefile."""
    constants: dict[str, set[str]] = {}
    python_units: list[tuple[set[str], set[str]]] = []  # (key names, names used)
    dataclasses = []
    for path in sorted((root / "workflow_scripts").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Name):
                        constants.setdefault(target.id, set()).update(_key_names(node))
                        # A key held in a constant (``REHEARSAL = "rehearsal"``), read as config[REHEARSAL].
                        constants[target.id].update(_strings(node.value) if node.value else ())
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and _is_dataclass(node):
                fields = {
                    s.target.id
                    for s in node.body
                    if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
                }
                dataclasses.append(fields)
        python_units += [(set(_key_names(unit)), _names(unit)) for unit in _python_units(tree)]
    rule_files = [*sorted((root / "rules").glob("*.smk")), root / "Snakefile"]
    for path in rule_files:
        for block in re.split(r"\n(?=[^\s#])", path.read_text()):
            keys = set(re.findall(r"""["']([A-Za-z_][A-Za-z0-9_]*)["']""", block))
            keys |= set(re.findall(r"\{[\w.]+\[(\w+)\]", block))  # a shell command's {params.hub[config]}
            python_units.append((keys, set(re.findall(r"\b[A-Za-z_]\w*\b", block))))
    units = [
        Unit(frozenset(keys.union(*(constants.get(name, set()) for name in names))), frozenset(names))
        for keys, names in python_units
    ]
    return Code(units, dataclasses)


def unread_keys(root: Path) -> list[str]:
    """Dotted schema paths of ``root``'s schema that no unit of its code reads."""
    schema = json.loads((root / "workflow_scripts" / "schemas" / "config.schema.json").read_text())
    siblings = sibling_keys(schema)
    code = read_code(root)
    unread = []
    for path in schema_paths(schema):
        key = path[-1]
        holders = [part for part in path[:-1] if part != ANY]
        holder = holders[-1] if holders else None
        aliases = set(HOLDER_NAMES.get(holder, ()))
        read = any(
            key in unit.keys and (holder is None or holder in unit.keys or aliases & unit.names)
            for unit in code.units
        )
        # A dataclass mirroring the object (its key and at least one sibling) is built from it by field name.
        mirrored = any(key in fields and len(fields & siblings[path[:-1]]) > 1 for fields in code.dataclasses)
        if not (read or mirrored):
            unread.append(".".join(path))
    return unread
