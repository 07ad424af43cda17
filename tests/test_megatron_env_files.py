"""The Megatron rules' two environments install what the docs say, from one pinned list.

``envs/megatron.yaml`` (conda, finished by ``envs/megatron.post-deploy.sh``) and
``envs/megatron.def`` (NVIDIA's container) share ``envs/requirements-megatron-gpu.txt``; whether
those pins install on the documented platform is ``tests/check_megatron_env_resolves.sh``'s check.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import yaml

ENVS = Path(__file__).resolve().parents[1] / "envs"
GPU_LIST = ENVS / "requirements-megatron-gpu.txt"
PIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*==[0-9][A-Za-z0-9.+!-]*$")
# What the yaml pins before the shared list: what NVIDIA's container brings built together (torch,
# numpy, Transformer Engine's core library) and what TE's PyTorch extension imports or needs to build.
CONTAINER_BUILT = {"torch", "numpy", "transformer-engine"}
CONDA_ONLY = CONTAINER_BUILT | {"onnx", "onnxscript", "nvdlfw-inspect", "wheel", "ninja"}
NO_DEPS = {"megatron-core", "megatron-bridge"}


def normalized(requirement: str) -> str:
    """The PEP 503 name of ``name[extras]==version``."""
    return re.sub(r"[-_.]+", "-", re.split(r"[\[=]", requirement, maxsplit=1)[0]).lower()


def gpu_list() -> list[str]:
    lines = (line.strip() for line in GPU_LIST.read_text().splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def conda_pins() -> list[str]:
    dependencies = yaml.safe_load((ENVS / "megatron.yaml").read_text())["dependencies"]
    return [pin for entry in dependencies if isinstance(entry, dict) for pin in entry["pip"]]


def def_sections() -> dict[str, list[str]]:
    """The Apptainer definition's sections (``%post`` -> its non-blank lines)."""
    sections: dict[str, list[str]] = {}
    current = None
    for line in (ENVS / "megatron.def").read_text().splitlines():
        if line.startswith("%"):
            current = sections.setdefault(line.split()[0], [])
        elif current is not None and line.strip():
            current.append(line.strip())
    return sections


def pip_installs(lines: list[str]) -> list[list[str]]:
    """The arguments after ``pip install`` of each line that runs it."""
    commands = []
    for line in lines:
        words = shlex.split(line, comments=True)
        for i in range(len(words) - 1):
            if words[i : i + 2] == ["pip", "install"]:
                commands.append(words[i + 2 :])
    return commands


def pins_of(arguments: list[str]) -> dict[str, str]:
    return {normalized(a): a for a in arguments if "==" in a}


def post_deploy_installs() -> list[list[str]]:
    return pip_installs((ENVS / "megatron.post-deploy.sh").read_text().splitlines())


def test_every_line_of_the_gpu_list_is_an_exact_pin():
    pins = gpu_list()
    assert pins
    assert [p for p in pins if not PIN.match(p)] == []
    names = [normalized(p) for p in pins]
    assert len(names) == len(set(names))


def test_the_conda_env_repeats_the_gpu_list_after_what_the_container_brings():
    pins, shared = conda_pins(), gpu_list()
    head = pins[: len(pins) - len(shared)]
    assert pins[len(head) :] == shared
    assert {normalized(p) for p in head} == CONDA_ONLY
    assert all("==" in p for p in head)


def test_the_container_installs_the_gpu_list_file():
    sections = def_sections()
    copies = dict(line.split() for line in sections["%files"])
    image_path = copies["envs/requirements-megatron-gpu.txt"]
    commands = pip_installs(sections["%post"])
    assert [a[i + 1] for a in commands for i, word in enumerate(a) if word == "-r"] == [image_path]


def test_bridge_and_core_are_installed_without_dependencies_at_one_version():
    installed = {}
    container = pip_installs(def_sections()["%post"])
    for where, commands in (("def", container), ("conda", post_deploy_installs())):
        chosen = [c for c in commands if NO_DEPS & set(pins_of(c))]
        assert len(chosen) == 1, where
        assert "--no-deps" in chosen[0], where
        installed[where] = {name: pin for name, pin in pins_of(chosen[0]).items() if name in NO_DEPS}
    assert set(installed["def"]) == NO_DEPS
    assert installed["def"] == installed["conda"]
    assert not NO_DEPS & {normalized(p) for p in conda_pins() + gpu_list()}
    tested = ENVS / "requirements-megatron-cpu.txt", ENVS / "requirements-megatron-bridge.txt"
    cpu_pins = {normalized(p): p for f in tested for p in f.read_text().split() if "==" in p}
    assert {name: cpu_pins[name] for name in NO_DEPS} == installed["def"]


def test_transformer_engine_comes_from_the_image_in_the_container():
    arguments = [a for command in pip_installs(def_sections()["%post"]) for a in command] + gpu_list()
    names = {normalized(a) for a in arguments if not a.startswith("-") and not a.startswith("/")}
    assert not {n for n in names if n.startswith("transformer-engine") or n == "torch"}


def test_the_conda_env_builds_transformer_engines_extension_at_its_core_librarys_version():
    (te,) = [c for c in post_deploy_installs() if "transformer-engine-torch" in pins_of(c)]
    assert {"--no-build-isolation", "--no-deps"} <= set(te)
    extension_version = pins_of(te)["transformer-engine-torch"].split("==")[1]
    core = pins_of(conda_pins())["transformer-engine"]
    assert core == f"transformer-engine[core-cu13]=={extension_version}"


def test_the_container_test_imports_bridges_training_core_and_transformer_engine():
    imported = set()
    for line in def_sections()["%test"]:
        words = shlex.split(line)
        if words[:2] == ["python", "-c"] and words[2].startswith("import "):
            imported |= {m.strip() for m in words[2].removeprefix("import ").split(",")}
    assert {"megatron.bridge.training.finetune", "megatron.core", "transformer_engine"} <= imported


def test_a_venv_of_an_env_runs_its_post_deploy_script_in_it(tmp_path, monkeypatch):
    """Without conda (``envs venv``) the environment is finished as Snakemake finishes a conda one."""
    import sys

    from workflow_scripts import envs_cli

    envs = tmp_path / "envs"
    envs.mkdir()
    (envs / "probe.post-deploy.sh").write_text('command -v python > "$OUT"\n')
    prefix = tmp_path / "venv"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "python").symlink_to(sys.executable)
    monkeypatch.setattr(envs_cli, "ENVS", envs)
    monkeypatch.setenv("OUT", str(tmp_path / "out"))
    envs_cli.post_deploy("probe", prefix)
    assert (tmp_path / "out").read_text().strip() == str(prefix / "bin" / "python")  # the env's own
    envs_cli.post_deploy("absent", prefix)  # an env without a script is left as pip made it
