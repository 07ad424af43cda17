"""The data commands end to end: toy sources, build, determinism, malformed input, download manifest."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import load_config
from workflow_scripts.chat_sources import toy
from workflow_scripts.chat_sources.readers import read_source
from workflow_scripts.data.cli import run_download
from workflow_scripts.data.scoring import PENALTIES, ScoringConfig, score_frame

ROOT = Path(__file__).resolve().parents[1]
SCORING = load_config(toy=False)["scoring"]
MATH_SPEC = {
    "domain": "math",
    "filter": "none",
    "train_rows": 150,
    "probe_tokens": 2000,
    "chars_per_token": 3.5,
    "probe_seed": 1,
}
CODE_SPEC = {**MATH_SPEC, "domain": "code", "filter": "fenced_code", "train_rows": 60}
COLUMNS = ["row_id", "source_id", "prompt", "answer", "score"]


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "workflow_scripts", "data", *args], cwd=ROOT, capture_output=True, text=True
    )


def toy_raw(path: Path, fmt: str, subset: str, rows: int = 300, seed: int = 0) -> Path:
    done = cli(
        "toy-raw",
        "--format",
        fmt,
        "--subset",
        subset,
        "--rows",
        str(rows),
        "--seed",
        str(seed),
        "--bad-fraction",
        "0.1",
        "--out",
        str(path),
    )
    assert done.returncode == 0, done.stderr
    return path


def build(
    raw: Path, out: Path, fmt: str, spec: dict, corpus: str = "toycorpus"
) -> subprocess.CompletedProcess:
    return cli(
        "build",
        "--raw",
        str(raw),
        "--format",
        fmt,
        "--corpus",
        corpus,
        "--spec",
        json.dumps(spec),
        "--scoring",
        json.dumps(SCORING),
        "--train",
        str(out / "train.parquet"),
        "--probe",
        str(out / "probe.parquet"),
        "--report",
        str(out / "report.json"),
    )


@pytest.mark.parametrize(("fmt", "subset"), sorted(toy.SUBSETS))
def test_toy_yields_every_penalty_kind(fmt: str, subset: str, tmp_path: Path) -> None:
    table = toy.generate(fmt, subset, rows=200, seed=3, bad_fraction=0.2)
    assert table.equals(toy.generate(fmt, subset, rows=200, seed=3, bad_fraction=0.2))
    assert not table.equals(toy.generate(fmt, subset, rows=200, seed=4, bad_fraction=0.2))
    pq.write_table(table, tmp_path / "raw.parquet")
    scored = score_frame(read_source(tmp_path / "raw.parquet", fmt), "math", ScoringConfig.from_dict(SCORING))
    for name in PENALTIES:
        assert scored[f"p_{name}"].any(), name
    assert (scored["c_length_answer"] < 0).any() and (scored["c_length_prompt"] < 0).any()


def test_toy_main_mixes_domains() -> None:
    domains = toy.generate("glm_sharegpt", "main", rows=300, seed=0, bad_fraction=0.0)["domain"].to_pylist()
    assert {"code", "general", "math"} == set(domains)


@pytest.mark.slow
def test_build_drops_penalised_rows_and_is_byte_identical(tmp_path: Path) -> None:
    raw = toy_raw(tmp_path / "Math.parquet", "glm_sharegpt", "Math")
    first, second = tmp_path / "a", tmp_path / "b"
    for out in (first, second):
        done = build(raw, out, "glm_sharegpt", MATH_SPEC)
        assert done.returncode == 0, done.stderr
    for name in ("train.parquet", "probe.parquet", "report.json"):
        assert (first / name).read_bytes() == (second / name).read_bytes(), name

    train, probe = pd.read_parquet(first / "train.parquet"), pd.read_parquet(first / "probe.parquet")
    assert list(train.columns[:5]) == COLUMNS and all(c.startswith("c_") for c in train.columns[5:])
    assert list(probe.columns) == list(train.columns)
    assert len(train) == 150 and train["row_id"].is_monotonic_increasing
    assert set(train["row_id"]).isdisjoint(probe["row_id"])
    scored = score_frame(read_source(raw, "glm_sharegpt"), "math", ScoringConfig.from_dict(SCORING))
    penalised = set(scored.loc[scored["n_penalties"] > 0, "row_id"])
    assert penalised and penalised.isdisjoint(train["row_id"]) and penalised.isdisjoint(probe["row_id"])
    assert not train["answer"].str.contains("<think>|</think>").any()
    report = json.loads((first / "report.json").read_text())
    assert report["rows_in"] == 300 and report["rows_train"] == 150 and report["rows_probe"] == len(probe)
    assert all(report["penalty_counts"][name] > 0 for name in PENALTIES)
    kept_cut = train["score"].min()
    dropped = scored[~scored["row_id"].isin(train["row_id"]) & (scored["n_penalties"] == 0)]
    assert (dropped["score"] <= kept_cut).all()


@pytest.mark.slow
def test_build_coding_corpus_from_openr1_and_main(tmp_path: Path) -> None:
    raw = toy_raw(tmp_path / "main.parquet", "glm_sharegpt", "main", rows=400)
    assert build(raw, tmp_path / "code", "glm_sharegpt", CODE_SPEC).returncode == 0
    train = pd.read_parquet(tmp_path / "code" / "train.parquet")
    assert train["answer"].str.contains("```").all() and (train["c_code_fences"] > 0).all()
    assert (train["c_latex"] == 0).all()
    raw = toy_raw(tmp_path / "default.parquet", "openr1", "default", rows=300)
    done = build(raw, tmp_path / "r1", "openr1", {**MATH_SPEC, "train_rows": None})
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "r1" / "report.json").read_text())
    on_a_side = report["rows_train"] + report["rows_probe"]
    assert on_a_side + report["rows_withheld_shared_prompt"] == report["rows_eligible"]
    general = {**MATH_SPEC, "domain": "general", "filter": "no_fenced_code", "train_rows": 0}
    done = build(tmp_path / "main.parquet", tmp_path / "general", "glm_sharegpt", general)
    assert done.returncode == 0, done.stderr
    empty_train = pd.read_parquet(tmp_path / "general" / "train.parquet")
    probe = pd.read_parquet(tmp_path / "general" / "probe.parquet")
    assert len(empty_train) == 0 and list(empty_train.columns) == list(probe.columns) and len(probe) > 0
    assert not probe["answer"].str.contains("```").any()


@pytest.mark.slow
def test_malformed_inputs_exit_2_naming_file_and_column(tmp_path: Path) -> None:
    good = toy.generate("glm_sharegpt", "Math", rows=20, seed=0, bad_fraction=0.0)
    cases = {
        "missing.parquet": (good.drop_columns(["conversations"]), "'conversations'"),
        "nonstring.parquet": (good.set_column(0, "id", pa.array([1.5] * 20)), "'id'"),
        "wronglist.parquet": (
            good.set_column(1, "conversations", pa.array([["a"]] * 20, pa.list_(pa.string()))),
            "'conversations'",
        ),
    }
    for name, (table, column) in cases.items():
        pq.write_table(table, tmp_path / name)
        done = build(tmp_path / name, tmp_path / "out", "glm_sharegpt", MATH_SPEC)
        assert done.returncode == 2, done.stderr
        assert name in done.stderr and column in done.stderr and "Traceback" not in done.stderr
    (tmp_path / "garbage.parquet").write_bytes(b"\x00garbage" * 100)
    done = build(tmp_path / "garbage.parquet", tmp_path / "out", "glm_sharegpt", MATH_SPEC)
    assert done.returncode == 2 and "garbage.parquet" in done.stderr and len(done.stderr.splitlines()) == 1
    done = build(tmp_path / "missing.parquet", tmp_path / "out", "glm_sharegpt", {**MATH_SPEC, "rows": 1})
    assert done.returncode == 2 and "unknown key 'rows'" in done.stderr
    assert not (tmp_path / "out").exists()


def test_download_writes_manifest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The commit is passed as given (hub.lock.yaml resolved it), with the format's declared columns."""
    calls = {}
    sha = "abc123" * 6 + "abcd"

    class FakeDataset:
        num_rows = 3

        def to_parquet(self, path: str) -> None:
            pq.write_table(pa.table({"x": [1, 2, 3]}), path)

    def load_dataset(repo, subset, split, revision, features=None):
        calls["load"] = (repo, subset, split, revision, features)
        return FakeDataset()

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    out, manifest = tmp_path / "raw" / "Math.parquet", tmp_path / "raw" / "Math.manifest.json"
    args = types.SimpleNamespace(
        repo="org/data",
        revision=sha,
        format="openr1",
        subset="Math",
        split="train",
        gated=False,
        out=str(out),
        manifest=str(manifest),
        first_rows=None,
    )
    run_download(args)
    record = json.loads(manifest.read_text())
    assert calls == {"load": ("org/data", "Math", "train", sha, None)}  # parquet sources keep their schema
    assert record["revision_resolved"] == sha and record["format"] == "openr1"
    assert record["rows"] == 3 and record["repo"] == "org/data" and len(record["parquet_sha256"]) == 64
    assert pq.read_table(out).num_rows == 3


@pytest.mark.slow
def test_download_reads_only_the_first_rows_of_a_json_lines_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--first-rows (the rehearsal's): the first rows of GLM-5.1's JSON Lines, in order, columns declared,
    read by the real ``datasets`` from a folder in the hub repository's layout."""
    from workflow_scripts.cli import main

    rows = toy.generate("glm_sharegpt", "Math", 40, seed=0, bad_fraction=0.1).to_pylist()
    folder = tmp_path / "org" / "glm"
    folder.mkdir(parents=True)
    (folder / "Math.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    card = "configs:\n- config_name: Math\n  data_files:\n  - split: train\n    path: Math.jsonl\n"
    (folder / "README.md").write_text(f"---\n{card}---\n")
    monkeypatch.chdir(tmp_path)
    out, manifest = tmp_path / "Math.parquet", tmp_path / "Math.manifest.json"
    argv = ["data", "download", "--format", "glm_sharegpt", "--repo", "org/glm", "--revision", "a" * 40]
    argv += ["--subset", "Math", "--out", str(out), "--manifest", str(manifest), "--first-rows", "7"]
    assert main(argv) == 0
    kept = pq.read_table(out).to_pylist()
    assert [row["conversations"] for row in kept] == [row["conversations"] for row in rows[:7]]
    assert json.loads(manifest.read_text())["first_rows"] == 7
    assert main([*argv[:-1], "0"]) == 2  # no rows is a user error


def test_download_without_datasets_is_a_user_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "datasets", None)  # import raises ImportError
    from workflow_scripts.errors import UserInputError

    args = types.SimpleNamespace(
        repo="r/d", revision="x", subset="s", split="train", gated=False, out="o", manifest="m"
    )
    with pytest.raises(UserInputError, match="datasets"):
        run_download(args)


@pytest.mark.slow
def test_build_drops_unclean_text_rows_and_counts_them(tmp_path: Path) -> None:
    """NULs in two raw rows used to pass and fail later in Arrow; now the build drops and counts them."""
    raw = toy_raw(tmp_path / "Math.parquet", "glm_sharegpt", "Math")
    clean = build(raw, tmp_path / "clean", "glm_sharegpt", MATH_SPEC)
    assert clean.returncode == 0, clean.stderr
    assert json.loads((tmp_path / "clean" / "report.json").read_text())["rows_dropped_invalid_text"] == 0
    table = pq.read_table(raw)
    conversations = table.column("conversations").to_pylist()
    for row in (7, 11):
        conversations[row][0]["value"] += "\x00"
    column = table.schema.get_field_index("conversations")
    field = table.schema.field(column)
    pq.write_table(table.set_column(column, field, pa.array(conversations, field.type)), raw)
    done = build(raw, tmp_path / "out", "glm_sharegpt", MATH_SPEC)
    assert done.returncode == 0, done.stderr
    assert f"{raw}: dropped 2 rows" in done.stderr and "row ids 7, 11" in done.stderr
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["rows_dropped_invalid_text"] == 2 and report["rows_in"] == 298
    assert not {7, 11} & set(pd.read_parquet(tmp_path / "out" / "train.parquet")["row_id"])


def _splits(out: Path) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    report = json.loads((out / "report.json").read_text())
    return pd.read_parquet(out / "train.parquet"), pd.read_parquet(out / "probe.parquet"), report


@pytest.mark.slow
def test_repeated_raw_rows_are_dropped_and_never_reach_the_probe_pool(tmp_path: Path) -> None:
    """The raw file's rows repeated once put training rows (same id and text) into the probe pool."""
    raw = toy_raw(tmp_path / "Math.parquet", "glm_sharegpt", "Math")
    table = pq.read_table(raw)
    repeated = tmp_path / "repeated" / "Math.parquet"
    repeated.parent.mkdir()
    pq.write_table(pa.concat_tables([table, table]), repeated)  # every row twice: ids and texts
    assert build(raw, tmp_path / "clean", "glm_sharegpt", MATH_SPEC).returncode == 0
    done = build(repeated, tmp_path / "out", "glm_sharegpt", MATH_SPEC)
    assert done.returncode == 0, done.stderr
    assert f"{repeated}: dropped 300 rows repeating an earlier row's id and content" in done.stderr
    train, probe, report = _splits(tmp_path / "out")
    assert report["rows_dropped_repeated"] == 300
    # Rows 300-599 copy 0-299; the toy's 10% damaged rows (NULs) are dropped before.
    assert report["rows_dropped_repeated_row_ids"][:2] == [300, 301] and report["rows_in"] == 300
    assert not set(train["source_id"]) & set(probe["source_id"])
    assert not set(train["prompt"]) & set(probe["prompt"])
    assert train["source_id"].is_unique and probe["source_id"].is_unique
    assert train["row_id"].max() < 300 and probe["row_id"].max() < 300, "the first copy is kept"
    for name in ("train.parquet", "probe.parquet"):  # the same corpus as from the file without copies
        assert (tmp_path / "out" / name).read_bytes() == (tmp_path / "clean" / name).read_bytes(), name


@pytest.mark.slow
def test_texts_under_other_ids_stay_on_one_side_and_are_counted(tmp_path: Path) -> None:
    """Copies of rows under new ids (and the toy's repeated prompts) never straddle train and probe."""
    table = pq.read_table(toy_raw(tmp_path / "Math.parquet", "glm_sharegpt", "Math"))
    copies = table.slice(0, 100)
    copies = copies.set_column(0, "id", pa.array([f"{i}-copy" for i in copies.column("id").to_pylist()]))
    raw = tmp_path / "renamed.parquet"
    pq.write_table(pa.concat_tables([table, copies]), raw)
    for name, spec in (("first", MATH_SPEC), ("probe_first", {**MATH_SPEC, "train_rows": None})):
        done = build(raw, tmp_path / name, "glm_sharegpt", spec)
        assert done.returncode == 0, done.stderr
        train, probe, report = _splits(tmp_path / name)
        assert report["rows_dropped_repeated"] == 0 and len(probe) > 0 and len(train) > 0
        assert not set(train["prompt"]) & set(probe["prompt"]), name
        pairs = [set(zip(side["prompt"], side["answer"], strict=True)) for side in (train, probe)]
        assert not pairs[0] & pairs[1]
        assert not set(train["source_id"]) & set(probe["source_id"])
        withheld = report["rows_withheld_shared_prompt"]
        assert withheld > 0, name
        if spec["train_rows"] is None:
            assert report["rows_train"] + report["rows_probe"] + withheld == report["rows_eligible"]


@pytest.mark.slow
def test_an_id_repeated_with_other_content_is_refused_naming_file_id_and_rows(tmp_path: Path) -> None:
    table = pq.read_table(toy_raw(tmp_path / "Math.parquet", "glm_sharegpt", "Math"))
    ids = table.column("id").to_pylist()
    conversations = table.column("conversations").to_pylist()
    changed = [dict(turn) for turn in conversations[4]]
    changed[-1]["value"] += " (a second answer)"
    column = table.schema.get_field_index("conversations")
    extra = table.slice(4, 1).set_column(
        column, table.schema.field(column), pa.array([changed], table.schema.field(column).type)
    )
    raw = tmp_path / "conflict.parquet"
    pq.write_table(pa.concat_tables([table, table.slice(0, 3), extra]), raw)
    done = build(raw, tmp_path / "out", "glm_sharegpt", MATH_SPEC)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert f"{raw}: id {ids[4]!r} names rows with different content, row ids 4, 303" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "out").exists()
