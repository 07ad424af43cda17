"""Between-workflow caching keyed on what was computed, and write-protected GPU-days."""

from __future__ import annotations

import os
import stat

import pytest

from tests.dag import JOB_ENV, PAPER, ROOT, SHORT_BASE, copy_checkout, snakemake, with_overlay
from workflow_scripts import hub

COMMIT = "0123456789abcdef0123456789abcdef01234567"
CACHED_RULES = ("build_corpus", "prior", "probe_routes")
# What a second workflow reuses: the split, the prior and the base probe of one corpus.
REUSED = {
    "results/data/math20k/train.parquet": "logs/data/build/math20k.log",
    "results/priors/moonlight/math20k/prior.npy": "logs/priors/moonlight/math20k.log",
    "results/probes/moonlight/math20k/base/routes.npz": "logs/probe/routes/moonlight/math20k/base.log",
}
TRAINED = "results/checkpoints/moonlight/math20k/sft/s42"


def test_moving_revisions_are_the_refs_neither_config_nor_lock_pins(paper_config):
    paper_config["models"]["moonlight"]["hub"]["revision"] = COMMIT
    lock = {("model", "Qwen/Qwen3-30B-A3B-Base", "main"): COMMIT}
    moving = hub.unlocked(paper_config, lock, ["datasets", "models"])
    assert "models.moonlight.hub.revision" not in moving and "models.qwen3_30b.hub.revision" not in moving
    assert {"datasets.glm51.hub.revision", "models.deepseek_v2_lite.hub.revision"} <= set(moving)


@pytest.mark.slow
def test_paper_scale_cache_of_a_moving_revision_is_refused(tmp_path):
    env = {**JOB_ENV, "SNAKEMAKE_OUTPUT_CACHE": str(tmp_path / "cache")}
    refused = snakemake(ROOT, "-n", *PAPER, "--cache", "prior", env=env)
    assert refused.returncode != 0
    assert "--cache: datasets.glm51.hub.revision" in refused.stderr + refused.stdout
    assert "moving ref, not a commit" in refused.stderr + refused.stdout
    pinned = tmp_path / "pinned.yaml"
    lines = [
        f"{section}:\n" + "".join(f"  {name}: {{hub: {{revision: {COMMIT}}}}}\n" for name in names)
        for section, names in (
            ("datasets", ("glm51", "openr1")),
            ("models", ("moonlight", "deepseek_v2_lite", "qwen3_30b")),
        )
    ]
    pinned.write_text("".join(lines))
    accepted = snakemake(ROOT, "-n", *PAPER, "--cache", "prior", "--configfile", str(pinned), env=env)
    assert accepted.returncode == 0, accepted.stderr[-2000:]


@pytest.mark.slow
def test_a_second_workflow_reuses_split_prior_and_base_probe(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    env = {**JOB_ENV, "SNAKEMAKE_OUTPUT_CACHE": str(cache)}
    first, second = copy_checkout(tmp_path / "first"), copy_checkout(tmp_path / "second")
    for workdir, trained in ((first, [TRAINED]), (second, [])):
        done = snakemake(
            workdir,
            *REUSED,
            *trained,
            *with_overlay(workdir, SHORT_BASE),
            "--cache",
            *CACHED_RULES,
            "--config",
            "protect_outputs=True",
            env=env,
        )
        assert done.returncode == 0, done.stderr[-3000:]
    for output, log in REUSED.items():
        assert (first / log).is_file(), f"the first workflow computes {output}"
        reused = second / output
        assert reused.is_symlink() and cache in reused.resolve().parents, f"{output} comes from the cache"
        assert not (second / log).exists() or (second / log).stat().st_size == 0, (
            f"{output} was not recomputed"
        )
        assert reused.read_bytes() == (first / output).read_bytes()
    assert any(cache.iterdir())
    # The trained checkpoint (GPU-days at paper scale) is read-only once written.
    files = [path for path in (first / TRAINED).rglob("*") if path.is_file()]
    assert files and not any(
        path.stat().st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH) for path in files
    )
    if os.geteuid() != 0:  # root ignores file modes, and Snakemake checks with os.access
        refused = snakemake(
            first, *with_overlay(first, SHORT_BASE), TRAINED, "--forcerun", "train_local", env=env
        )
        assert refused.returncode != 0 and "Write-protected output files" in refused.stderr + refused.stdout
