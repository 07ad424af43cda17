"""Shared fixtures: the shipped registry at both scales, and the inputs of a short training run."""

from __future__ import annotations

import copy
import gc
from pathlib import Path

import pytest

from workflow_scripts import registry

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "workflow_scripts" / "schemas" / "config.schema.json"


def load_config(toy: bool) -> dict:
    """The shipped registry at one scale, loaded as the workflow loads it (validated, seeds capped)."""
    return registry.load_config(registry.shipped_config_files(ROOT, toy))


@pytest.fixture(scope="session")
def _paper_config() -> dict:
    return load_config(toy=False)


@pytest.fixture()
def paper_config(_paper_config: dict) -> dict:
    """A fresh, mutable copy of the paper-scale config."""
    return copy.deepcopy(_paper_config)


@pytest.fixture()
def toy_config() -> dict:
    return load_config(toy=True)


@pytest.fixture(scope="session")
def training_inputs(tmp_path_factory) -> dict[str, Path]:
    """A tiny deepseek_v3 base, a 24-row split and its prior: what ``train run`` reads."""
    import pandas as pd

    from tests.dag import TRAIN_SPEC, toy_rows, toy_tokenizer
    from workflow_scripts.cli import main
    from workflow_scripts.modeling.toy import build_toy_model, save_toy_base

    root = tmp_path_factory.mktemp("training_inputs")
    tokenizer = toy_tokenizer()
    save_toy_base(build_toy_model("deepseek_v3", TRAIN_SPEC, tokenizer, 0), tokenizer, root / "base")
    prompts, answers = toy_rows()
    split = pd.DataFrame({"row_id": range(len(prompts)), "prompt": prompts, "answer": answers})
    split.to_parquet(root / "train.parquet")
    prior = ["priors", "compute", "--model", str(root / "base"), "--split", str(root / "train.parquet")]
    prior += ["--prior", str(root / "prior.npy"), "--meta", str(root / "meta.json")]
    prior += ["--stats", str(root / "stats.json"), "--batch-size", "8", "--max-length", "64"]
    assert main(prior) == 0
    return {
        "base": root / "base",
        "split": root / "train.parquet",
        "prior": root / "prior.npy",
        "meta": root / "meta.json",
    }


@pytest.fixture(scope="session")
def toy_run(tmp_path_factory) -> Path:
    """The suite's one real toy run (tests/dag.py's toy_run_targets), shared by the modules that read it."""
    from tests.dag import build_toy_run

    return build_toy_run(tmp_path_factory.mktemp("toy") / "rpb-repro")


# Session fixtures that take minutes: under pytest-xdist (``-n``), the tests using one run on one
# worker, so that it is built once.
SHARED_ON_ONE_WORKER = ("toy_run",)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's, which reads the groups
def pytest_collection_modifyitems(config, items):
    """Skip ``slurm`` and ``rehearsal`` tests unless ``-m`` names them: they need the test cluster
    and take minutes. A user of a ``SHARED_ON_ONE_WORKER`` fixture is ``slow`` (it waits for minutes
    of Snakemake), marked here so that the fast loop never builds one. Under ``-n`` (``--dist
    loadgroup``), a module's tests stay together (its module-scoped fixtures are built once) and
    the users of a ``SHARED_ON_ONE_WORKER`` fixture too."""
    group_of_module: dict[str, str] = {}
    for item in items:
        module = item.module.__name__
        shared = [name for name in SHARED_ON_ONE_WORKER if name in getattr(item, "fixturenames", ())]
        if shared:
            item.add_marker(pytest.mark.slow)
        if shared or module not in group_of_module:
            group_of_module[module] = shared[0] if shared else module
    for item in items:
        item.add_marker(pytest.mark.xdist_group(group_of_module[item.module.__name__]))
    skip = pytest.mark.skip(reason="needs the test SLURM cluster: bash tests/run_slurm.sh")
    for marker in ("slurm", "rehearsal"):
        if marker in (config.option.markexpr or ""):
            continue
        for item in items:
            if item.get_closest_marker(marker):
                item.add_marker(skip)


def pytest_configure(config):
    """No cyclic garbage collection while the test modules import torch, transformers and SciPy:
    what they build lives until the end (``pytest_collection_finish`` turns it back on)."""
    gc.disable()


def pytest_collection_finish(session):
    """Freeze what collection built, most of the heap, out of the collector's sight, so that the
    full collections during the tests walk only the tests' own objects (the fork server does the
    same for its jobs)."""
    gc.freeze()
    gc.enable()
