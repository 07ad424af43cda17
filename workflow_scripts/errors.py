"""The errors a command expects, and the one line each is reported as (``workflow_scripts.cli``).

It lives at the bottom, below every stage and the CLI layer, so that domain modules can raise
``UserInputError`` without importing the CLI (whose entry point imports the stages back). Every
command's expected failures (bad input, a path that is missing or of the wrong kind, a full
disk, a package its environment lacks, the hub out of reach) end in one line naming the
argument and the way out; anything else is a defect and keeps its traceback.
"""

from __future__ import annotations

import errno
import shlex
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

#: Exit status of bad input (a file, key, value or argument the user can fix).
BAD_INPUT = 2
#: Exit status of the machine failing a correct command (disk, permissions, packages, network).
ENVIRONMENT = 1

#: Packages only some environments hold, and where to find one that does.
OPTIONAL_PACKAGES = {
    "megatron": "the Megatron environment (envs/megatron.yaml, or the container envs/megatron.def)",
    "transformer_engine": "the Megatron environment (envs/megatron.yaml, or the container envs/megatron.def)",
    "vllm": "the evaluation environment (envs/eval.yaml)",
}
# Libraries whose errors mean the Hugging Face hub was not reached or refused the request.
_HUB_MODULES = ("huggingface_hub", "httpx", "httpx2", "httpcore", "requests", "urllib3")
_PATH_PROBLEMS = {
    errno.ENOENT: "no such file or directory",
    errno.EISDIR: "is a directory where a file is expected",
    errno.ENOTDIR: "is not a directory (or a part of it is a file)",
    errno.EACCES: "permission denied (a protected output is read-only: snakemake --unprotect or chmod)",
    errno.EPERM: "operation not permitted",
    errno.EROFS: "is on a read-only filesystem",
    errno.EEXIST: "already exists",
}


class UserInputError(Exception):
    """Bad input (file, column, key, value): reported as one clear line, without a traceback."""


@dataclass(frozen=True)
class Report:
    """What a command prints (after ``error: ``) and the status it exits with."""

    message: str
    status: int


def expected_error(
    error: BaseException, paths: Mapping[str, str], labels: Mapping[str, str]
) -> Report | None:
    """The one-line report of an expected failure, or None for a defect (its traceback stands).

    ``paths`` are the command's path arguments by destination (``inputs_list[0]``) and
    ``labels`` its options by destination (``--inputs``), so that a failing path is named by
    the argument that gave it.
    """
    if isinstance(error, UserInputError):
        return Report(str(error), BAD_INPUT)
    if isinstance(error, ModuleNotFoundError):
        package = (error.name or "").partition(".")[0]
        if package in OPTIONAL_PACKAGES:
            return Report(
                f"this command needs {package!r}, which this Python does not have: run it in "
                f"{OPTIONAL_PACKAGES[package]}",
                ENVIRONMENT,
            )
        return None
    if isinstance(error, OSError) and error.errno == errno.ENOSPC:
        return Report(
            f"{_named(error, paths, labels)}: no space left on the device; free space and rerun "
            "(finished outputs are kept, this one was not written)",
            ENVIRONMENT,
        )
    if isinstance(error, OSError) and error.errno in _PATH_PROBLEMS and error.filename is not None:
        status = BAD_INPUT if error.errno in (errno.ENOENT, errno.EISDIR, errno.ENOTDIR) else ENVIRONMENT
        return Report(f"{_named(error, paths, labels)}: {_PATH_PROBLEMS[error.errno]}", status)
    if isinstance(error, subprocess.CalledProcessError):  # its own messages are already on stderr
        command = error.cmd if isinstance(error.cmd, str) else shlex.join(map(str, error.cmd))
        said = f"{command} exited with status {error.returncode} (its messages are above)"
        return Report(said, ENVIRONMENT)
    if type(error).__module__.partition(".")[0] in _HUB_MODULES:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return Report(
            f"the Hugging Face hub could not serve the request ({first_line}); check the network, "
            "HF_TOKEN for gated repositories, and that the repository and revision exist",
            ENVIRONMENT,
        )
    return None


def _named(error: OSError, paths: Mapping[str, str], labels: Mapping[str, str]) -> str:
    """The failing path, after the argument that gave it (it, or a folder above it) where one did."""
    failing = [str(name) for name in (error.filename, error.filename2) if name is not None]
    for name, given in paths.items():
        for path in failing:
            if _within(path, given):
                return f"{option_name(name, labels)} {given}" + (
                    "" if Path(path) == Path(given) else f" ({path})"
                )
    # ``atomic_path`` moves a temporary sibling onto the target: name the target, not the sibling.
    return failing[-1] if failing else str(error)


def _within(path: str, given: str) -> bool:
    path_, given_ = Path(path).absolute(), Path(given).absolute()
    return path_ == given_ or given_ in path_.parents


def option_name(name: str, labels: Mapping[str, str]) -> str:
    """The option that gave argument ``name`` (``inputs_list[1]`` → ``--inputs``), else ``--name``."""
    dest = name.partition("[")[0]
    return labels.get(dest, "--" + dest.replace("_", "-"))
