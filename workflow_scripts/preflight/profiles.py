"""The resources a run's Snakemake profiles give its jobs, each value with the file and key that set it.

Profiles are layered as Snakemake layers them: a later ``--profile`` replaces an earlier one's
top-level keys whole, so a ``default-resources`` block comes from one file only. Naming that
file and key is what lets a failed check say where to fix it.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from workflow_scripts.errors import UserInputError

DEFAULT = "default-resources"
PER_RULE = "set-resources"
#: Where Snakemake looks for a profile named by a bare name that is no path here (Linux).
_CONFIG_FILE = re.compile(r"(?:profile|config)(?:\.v(?P<min_major>\d+)\+)?\.yaml")


def from_argv(argv: Sequence[str], environ: Mapping[str, str]) -> list[str]:
    """The ``--profile`` values of a Snakemake command line, in order (``$SNAKEMAKE_PROFILE`` without one)."""
    names: list[str] = []
    args = list(argv[1:])
    for index, arg in enumerate(args):
        if arg == "--profile" and index + 1 < len(args):
            names.append(args[index + 1])
        elif arg.startswith("--profile="):
            names.append(arg.partition("=")[2])
    if not names and environ.get("SNAKEMAKE_PROFILE"):
        names = [environ["SNAKEMAKE_PROFILE"]]
    return [] if names == ["none"] else names


def _search_folders() -> list[Path]:
    """The working directory, then the user's and the site's Snakemake config folders (XDG)."""
    home = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    site = os.environ.get("XDG_CONFIG_DIRS", "/etc/xdg").split(os.pathsep)[0]
    return [Path(os.getcwd()), home / "snakemake", Path(site) / "snakemake"]


def _snakemake_major() -> int:
    try:
        return int(importlib.metadata.version("snakemake").split(".")[0])
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return 9


def resolve(name: str) -> Path | None:
    """The YAML file of profile ``name`` as ``snakemake --profile name`` finds it, or None.

    A path to a file is that file; a folder holds ``config.yaml`` or ``profile.yaml`` (or a
    versioned ``config.v9+.yaml``); a bare name is looked up in the working directory, then in
    the user's and the site's Snakemake config folders (``snakemake.cli.get_profile_dir``).
    """
    if os.path.exists(name):
        if os.path.isfile(name):
            return Path(name)
        folders, name = [Path(os.path.dirname(name) or ".")], os.path.basename(name)
    else:
        folders = _search_folders()
    major = _snakemake_major()
    for folder in folders:
        candidate = folder / name
        if candidate.is_file():
            return candidate
        if candidate.is_dir():
            files = {}
            for file in os.listdir(candidate):
                if match := _CONFIG_FILE.fullmatch(file):
                    needs = int(match["min_major"] or 0)
                    if needs <= major:
                        files[file] = needs
            if files:
                return candidate / max(files, key=files.get)
    return None


def display(path: Path) -> str:
    """A file as a user finds it: relative to the working directory where inside it, links resolved."""
    real = Path(os.path.realpath(path))
    here = Path(os.path.realpath(os.getcwd()))
    return str(real.relative_to(here)) if real.is_relative_to(here) else str(real)


@dataclass(frozen=True)
class Profile:
    """One profile file and its content."""

    path: Path
    content: Mapping[str, Any]


def read(path: Path) -> Profile:
    try:
        content = yaml.safe_load(Path(path).read_text()) or {}
    except OSError as error:
        raise UserInputError(f"profile {path}: {error.strerror}") from None
    except yaml.YAMLError as error:
        raise UserInputError(f"profile {path}: not valid YAML ({error})") from None
    if not isinstance(content, dict):
        raise UserInputError(f"profile {path}: a profile holds a mapping of options")
    return Profile(Path(path), content)


def read_named(names: Sequence[str]) -> list[Profile]:
    """The profiles ``names`` resolve to, as ``snakemake --profile`` resolves them; an unknown one fails."""
    found = []
    for name in names:
        path = resolve(name)
        if path is None:
            raise UserInputError(
                f"--profile {name}: no such profile (a folder with config.yaml, or a YAML file)"
            )
        found.append(read(path))
    return found


def _unquoted(text: str) -> Any:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return int(text) if text.isdigit() else text


def _assignments(block: Any, where: str) -> dict[str, Any]:
    """A resources block as a mapping: YAML's mapping form, or Snakemake's list of ``key=value``."""
    if isinstance(block, Mapping):
        return dict(block)
    if isinstance(block, list):
        pairs = [str(item).partition("=") for item in block]
        if all(equals for _, equals, _ in pairs):
            return {key.strip(): _unquoted(value) for key, _, value in pairs}
    raise UserInputError(f"{where}: expected a mapping of resources (or a list of key=value)")


def _per_rule(block: Any, where: str) -> dict[str, dict[str, Any]]:
    if isinstance(block, list):  # Snakemake's list form: rule:key=value
        rules: dict[str, dict[str, Any]] = {}
        for item in block:
            rule, colon, assignment = str(item).partition(":")
            if not colon:
                raise UserInputError(f"{where}: expected rule:key=value entries, found {item!r}")
            rules.setdefault(rule.strip(), {}).update(_assignments([assignment], where))
        return rules
    if not isinstance(block, Mapping):
        raise UserInputError(f"{where}: expected a mapping of rule names to resources")
    return {str(rule): _assignments(values, f"{where}.{rule}") for rule, values in block.items()}


@dataclass(frozen=True)
class Setting:
    """A resource's value and where it was set (``<file>: default-resources.slurm_account``)."""

    value: Any
    where: str


@dataclass(frozen=True)
class Resources:
    """``default-resources`` and ``set-resources`` of layered profiles, each with the file it came from."""

    default: Mapping[str, Any] = field(default_factory=dict)
    default_file: str | None = None
    per_rule: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    per_rule_file: str | None = None
    files: tuple[str, ...] = ()

    @classmethod
    def layered(cls, profiles: Sequence[Profile]) -> Resources:
        """The resources of ``profiles`` in order: a later one's block replaces an earlier one's whole."""
        default, default_file, per_rule, per_rule_file = {}, None, {}, None
        for profile in profiles:
            where = display(profile.path)
            if DEFAULT in profile.content:
                default, default_file = _assignments(profile.content[DEFAULT], f"{where}: {DEFAULT}"), where
            if PER_RULE in profile.content:
                per_rule, per_rule_file = _per_rule(profile.content[PER_RULE], f"{where}: {PER_RULE}"), where
        return cls(default, default_file, per_rule, per_rule_file, tuple(display(p.path) for p in profiles))

    def rules(self) -> list[str]:
        """Rules with resources of their own, in the profile's order (every other rule gets the defaults)."""
        return list(self.per_rule)

    def cpu_rule(self) -> str | None:
        """The first rule with a partition of its own and no GPU: where CPU jobs go (None: the default)."""
        return next(
            (
                rule
                for rule in self.per_rule
                if "slurm_partition" in self.per_rule[rule] and not {"gpu", "gres"} & set(self.per_rule[rule])
            ),
            None,
        )

    def value(self, rule: str | None, key: str) -> Setting | None:
        """Resource ``key`` of ``rule`` (None: a rule without its own block), or None where unset."""
        if rule in self.per_rule and key in self.per_rule[rule]:
            return Setting(self.per_rule[rule][key], f"{self.per_rule_file}: {PER_RULE}.{rule}.{key}")
        if key in self.default:
            return Setting(self.default[key], f"{self.default_file}: {DEFAULT}.{key}")
        return None
