"""Every command checks its inputs against the records that wrote them, and names a file it cannot read.

The records here are written by the real code (a ``probe partition`` run through
``cli.main`` with ``--provenance``, or ``build_record`` as the producing job would),
the damage is real (a flipped byte, a truncated or corrupt file), and each consumer is
run through ``cli.main`` as Snakemake runs it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.test_report_routing_tables import TINY_K, _random_topk, _routes
from workflow_scripts import records
from workflow_scripts.cli import main
from workflow_scripts.records import build_record
from workflow_scripts.records.verify import verify_inputs

DETECTOR = json.dumps({"name": "louvain", "resolution": 1.0, "seed": 0, "tolerance": 1e-6, "rho": 0.1})
ROUTES = Path("results/probes/m/c/base/routes.npz")
PARTITION = Path("results/graphs/m/c/base/partition.json")
PRIOR = Path("results/priors/m/c/prior.npy")
BASE = Path("results/models/m/base")


def _flip_byte(path: Path, offset: int = -1) -> None:
    """Invert one byte in place (size unchanged), as bit rot or a stray write would."""
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def _write_record(record: Path, command: str, outputs: dict[str, Path]) -> None:
    """The record the job producing ``outputs`` writes beside them."""
    payload = build_record(command, {}, {}, {name: str(p) for name, p in outputs.items()}, "t0", 0.0)
    record.write_text(json.dumps(payload))


def _shuffle(tmp: Path, prior: Path = PRIOR, partition: Path = PARTITION) -> list[str]:
    """``priors shuffle`` arguments as rules/probe.smk passes them."""
    out = tmp / "results/priors/m/c"
    command = ["priors", "shuffle", "--prior", str(prior), "--partition", str(partition)]
    command += ["--top-k", str(TINY_K), "--seed", "0", "--validation-seeds", "0", "--rhos", "0.1"]
    command += ["--validation", str(out / "v.json"), "--within", str(out / "within.npy")]
    return [*command, "--global", str(out / "global.npy")]


@pytest.fixture()
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A workflow working directory: routes and a prior with their records, a partition written by main."""
    monkeypatch.chdir(tmp_path)
    ROUTES.parent.mkdir(parents=True)
    _routes(_random_topk(np.random.default_rng(0)), ROUTES.parent)
    _write_record(ROUTES.parent / "provenance.json", "probe routes", {"routes": ROUTES})
    PRIOR.parent.mkdir(parents=True)
    labels = json.loads(_partition().read_text())["labels"]
    prior = np.random.default_rng(1).dirichlet(np.full(len(labels[0]), 0.3), size=(24, 2, len(labels)))
    np.save(PRIOR, prior.astype(np.float32))
    _write_record(PRIOR.parent / "provenance.json", "priors compute", {"prior": PRIOR})
    return tmp_path


def _partition_command(routes: Path, out: Path = Path("p.json")) -> list[str]:
    return ["probe", "partition", "--routes", str(routes), "--detector", DETECTOR, "--out", str(out)]


def _partition() -> Path:
    """The base partition, written by main with its record as rules/probe.smk does."""
    record = PARTITION.parent / "provenance.json"
    assert main([*_partition_command(ROUTES, PARTITION), "--provenance", str(record)]) == 0
    return PARTITION


def test_untouched_inputs_pass_and_verification_writes_nothing(workdir: Path) -> None:
    before = {p: p.stat().st_mtime_ns for p in workdir.rglob("*")}
    assert main(_partition_command(ROUTES)) == 0
    after = {p: p.stat().st_mtime_ns for p in workdir.rglob("*") if p.name != "p.json"}
    assert after == before  # the toy pipeline's files are only read
    assert main(_shuffle(workdir)) == 0


def test_a_flipped_byte_in_an_output_of_main_is_refused(workdir: Path, capsys) -> None:
    _flip_byte(PARTITION, offset=20)
    assert main(_shuffle(workdir)) == 2
    error = capsys.readouterr().err
    assert (
        f"{PARTITION}: sha256 " in error
        and "results/graphs/m/c/base/provenance.json (probe partition)" in error
    )
    assert f"snakemake --forcerun {PARTITION}" in error
    assert not (workdir / "results/priors/m/c/within.npy").exists()


@pytest.mark.parametrize("path", [PRIOR, ROUTES])
def test_a_flipped_byte_in_a_prior_or_routes_file_is_refused(workdir: Path, capsys, path) -> None:
    recorded = records.file_sha256(path)
    _flip_byte(path)
    assert main(_shuffle(workdir) if path == PRIOR else _partition_command(ROUTES)) == 2
    error = capsys.readouterr().err
    assert f"{path}: sha256 {records.file_sha256(path)} differs from {recorded}" in error
    assert f"{path.parent}/provenance.json" in error


def test_an_absolute_path_matches_the_relative_one_recorded(workdir: Path, capsys) -> None:
    _flip_byte(PRIOR)
    assert main(_shuffle(workdir, prior=workdir / "results/priors/m/../m/c/prior.npy")) == 2
    assert "results/priors/m/c/provenance.json" in capsys.readouterr().err


def test_an_unparseable_record_is_named(workdir: Path, capsys) -> None:
    record = PRIOR.parent / "shuffle-provenance.json"
    record.write_text('{"outputs": ')
    assert main(_shuffle(workdir)) == 2
    assert f"{record}: unreadable provenance record" in capsys.readouterr().err


def test_an_input_no_record_lists_is_accepted_and_recorded(workdir: Path) -> None:
    raw = workdir / "raw.npy"  # a raw input: no record lists it
    np.save(raw, np.load(PRIOR))
    record = workdir / "shuffle-provenance.json"
    assert main([*_shuffle(workdir, prior=raw), "--provenance", str(record)]) == 0
    inputs = json.loads(record.read_text())["inputs"]
    assert inputs["prior"]["sha256"] == records.file_sha256(raw)
    assert inputs["partition"]["sha256"] == records.file_sha256(PARTITION)


def test_each_input_is_hashed_once(workdir: Path, monkeypatch) -> None:
    hashed: list[Path] = []
    real = records.file_sha256
    monkeypatch.setattr(records, "file_sha256", lambda path: hashed.append(path) or real(path))
    record = workdir / "partition-provenance.json"
    assert main([*_partition_command(ROUTES), "--provenance", str(record)]) == 0
    assert sorted(map(str, hashed)) == sorted([str(ROUTES), "p.json"])  # the input once, the output once


@pytest.mark.parametrize(
    "damage",
    [
        lambda b: b[: len(b) // 2],
        lambda b: b[:99] + bytes([b[99] ^ 0xFF]) + b[100:],
        lambda b: b"",
        lambda b: b"junk" * 9,
    ],
)
def test_a_corrupt_routes_file_is_named(tmp_path: Path, capsys, damage) -> None:
    _routes(_random_topk(np.random.default_rng(0)), tmp_path)
    routes = tmp_path / "routes.npz"
    routes.write_bytes(damage(routes.read_bytes()))
    assert main(_partition_command(routes, tmp_path / "p.json")) == 2
    assert f"{routes}: not a readable routes .npz" in capsys.readouterr().err


@pytest.mark.parametrize(
    "damage", [lambda b: b[: len(b) - 7], lambda b: b[:20] + b"\xff" + b[21:], lambda b: b""]
)
def test_a_corrupt_prior_is_named(workdir: Path, capsys, damage) -> None:
    raw = workdir / "raw.npy"  # unrecorded, so the loader, not the checksum, meets the damage
    raw.write_bytes(damage(PRIOR.read_bytes()))
    assert main(_shuffle(workdir, prior=raw)) == 2
    assert f"{raw}: not a readable prior .npy" in capsys.readouterr().err


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny real MoE checkpoint (deepseek_v3) and a probe pool beside it."""
    pytest.importorskip("torch")
    from tests.dag import TINY_SPEC, toy_rows, toy_tokenizer
    from workflow_scripts.modeling.toy import ToyModelSpec, build_toy_model, save_toy_base

    root = tmp_path_factory.mktemp("checkpoint")
    tokenizer = toy_tokenizer()
    save_toy_base(
        build_toy_model("deepseek_v3", ToyModelSpec(**TINY_SPEC), tokenizer, 0), tokenizer, root / "base"
    )
    prompts, answers = toy_rows()
    pool = pd.DataFrame({"row_id": range(len(prompts)), "prompt": prompts, "answer": answers})
    pool.to_parquet(root / "pool.parquet")
    return root / "base"


def _copy_checkpoint(source: Path, target: Path) -> Path:
    target.mkdir(parents=True)
    for file in source.iterdir():
        (target / file.name).write_bytes(file.read_bytes())
    return target


def _probe(checkpoint: Path, pool: Path, out: Path) -> list[str]:
    command = ["probe", "routes", "--checkpoint", str(checkpoint), "--pool", str(pool), "--tokens", "64"]
    return [*command, "--max-length", "32", "--routes", str(out / "r.npz"), "--meta", str(out / "m.json")]


def test_a_checkpoint_with_a_flipped_byte_is_not_probed(
    checkpoint: Path, tmp_path, monkeypatch, capsys
) -> None:
    monkeypatch.chdir(tmp_path)
    base = _copy_checkpoint(checkpoint, BASE)
    _write_record(BASE.parent / "provenance.json", "models toy", {"out": BASE})
    (base / ".snakemake_timestamp").touch()  # as Snakemake does after the job: not a change
    recorded = json.loads((BASE.parent / "provenance.json").read_text())["outputs"]["out"]
    kinds = {"checkpoint": "folder"}
    assert (
        verify_inputs({"checkpoint": str(BASE)}, digest_all=False, kinds=kinds, labels={})["checkpoint"]
        == recorded
    )
    _flip_byte(base / "model.safetensors")  # the last tensor byte: the header still parses
    assert main(_probe(BASE, checkpoint.parent / "pool.parquet", tmp_path)) == 2
    error = capsys.readouterr().err
    assert f"{BASE}: sha256 " in error and "results/models/m/provenance.json (models toy)" in error
    assert not (tmp_path / "r.npz").exists()


@pytest.mark.parametrize("command", ["probe", "prior"])
def test_a_truncated_safetensors_file_is_named(checkpoint: Path, tmp_path, capsys, command) -> None:
    base = _copy_checkpoint(checkpoint, tmp_path / "base")
    weights = base / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: os.path.getsize(weights) // 2])
    pool = checkpoint.parent / "pool.parquet"
    prior = ["priors", "compute", "--model", str(base), "--split", str(pool)]
    prior += ["--prior", str(tmp_path / "p.npy"), "--meta", str(tmp_path / "m.json")]
    prior += ["--stats", str(tmp_path / "s.json")]
    prior += ["--batch-size", "4", "--max-length", "32", "--clip-eps", "0.05", "--clip-c", "5.0"]
    assert main(_probe(base, pool, tmp_path) if command == "probe" else prior) == 2
    assert f"{weights}: unreadable checkpoint weights" in capsys.readouterr().err
