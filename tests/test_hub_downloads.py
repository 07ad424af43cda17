"""Hub downloads through ``datasets`` itself, on dataset folders written here (no hub: a local path).

``datasets.load_dataset`` reads a folder whose path is given as the repository id as it reads a hub
repository's files (its README's ``configs``, its data files, the same builders), so the download
commands run unchanged on ``fakehub/<name>``, a valid repository id, from the test's folder.
"""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from workflow_scripts.chat_sources import toy
from workflow_scripts.chat_sources.readers import read_source
from workflow_scripts.cli import main
from workflow_scripts.evaluate.fixtures import read_fixture
from workflow_scripts.evaluate.items import MMLU_STEM_SUBJECTS

COMMIT = "0123456789abcdef0123456789abcdef01234567"
# datasets' JSON loader reads 10 MB chunks and fixes the schema from the first (JsonConfig.chunksize).
JSON_CHUNK = 10 << 20


@pytest.fixture()
def hub_folder(tmp_path, monkeypatch) -> Path:
    """A working folder for ``fakehub/...`` repositories, with its own datasets cache."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "cache")
    return tmp_path


def write_repo(root: Path, name: str, files: dict[str, tuple[str, str]]) -> str:
    """``fakehub/<name>`` with one config per ``files`` entry (config -> (split, data file)); its id."""
    repo = root / "fakehub" / name
    repo.mkdir(parents=True)
    configs = [{"config_name": c, "data_files": [{"split": s, "path": p}]} for c, (s, p) in files.items()]
    (repo / "README.md").write_text(f"---\n{yaml.safe_dump({'configs': configs})}---\n")
    return f"fakehub/{name}"


def glm_rows_with_a_late_meta(path: Path) -> int:
    """JSON Lines in GLM-5.1's layout: over one JSON chunk of rows without ``meta``, then one with it."""
    table = toy.generate("glm_sharegpt", "Math", rows=400, seed=0, bad_fraction=0.0)
    rows = [{k: v for k, v in row.items() if k != "meta"} for row in table.to_pylist()]
    written = count = 0
    with path.open("w") as out:
        while written <= JSON_CHUNK:
            line = json.dumps({**rows[count % len(rows)], "id": f"math-{count}"}) + "\n"
            written += out.write(line)
            count += 1
        out.write(json.dumps({**rows[0], "id": "late", "meta": {"source": "late", "tags": ["x"]}}) + "\n")
    return count + 1


@pytest.mark.slow
def test_glm_rows_with_a_meta_first_seen_past_the_first_chunk_download_whole(hub_folder):
    repo = write_repo(hub_folder, "glm51", {"Math": ("train", "Math.jsonl")})
    rows = glm_rows_with_a_late_meta(hub_folder / repo / "Math.jsonl")
    # What the download met before it declared the columns: the schema of the first chunk lacks meta.
    with pytest.raises(datasets.exceptions.DatasetGenerationError):
        datasets.load_dataset(repo, "Math", split="train")
    argv = ["data", "download", "--format", "glm_sharegpt", "--repo", repo, "--revision", COMMIT]
    argv += ["--subset", "Math", "--split", "train", "--out", "Math.parquet", "--manifest", "Math.json"]
    assert main(argv) == 0
    manifest = json.loads((hub_folder / "Math.json").read_text())
    assert manifest["rows"] == rows and manifest["revision_resolved"] == COMMIT
    table = pq.read_table(hub_folder / "Math.parquet")
    assert table.column_names == ["id", "conversations", "input", "output", "domain", "meta"]
    meta = table.column("meta").to_pylist()
    assert meta[:-1] == [None] * (rows - 1) and json.loads(meta[-1]) == {"source": "late", "tags": ["x"]}
    source = read_source(hub_folder / "Math.parquet", "glm_sharegpt")  # what the corpus build reads
    assert len(source) == rows and source["source_id"].iloc[-1] == "late"


def mmlu_repo(root: Path) -> tuple[str, int]:
    """``cais/mmlu``'s ``all`` config laid out as parquet: the fixture's rows, some of STEM subjects."""
    repo = write_repo(root, "mmlu", {"all": ("test", "all/test.parquet")})
    frame = read_fixture("mmlu")
    stem = sorted(MMLU_STEM_SUBJECTS)
    frame["subject"] = [stem[i] if i % 2 else "world_religions" for i in range(len(frame))]
    (root / repo / "all").mkdir()
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), root / repo / "all" / "test.parquet")
    return repo, len(frame) // 2


def benchmark_download(benchmark: str, repo: str, rows: int, subset: str = "all") -> list[str]:
    argv = ["evaluate", "download", "--benchmark", benchmark, "--rows", str(rows), "--repo", repo]
    argv += ["--revision", COMMIT, "--subset", subset, "--split", "test"]
    return [*argv, "--out", f"{benchmark}/raw.parquet", "--manifest", f"{benchmark}/manifest.json"]


@pytest.mark.slow
def test_a_benchmark_download_counts_the_items_its_filter_keeps(hub_folder):
    repo, stem_rows = mmlu_repo(hub_folder)
    assert main(benchmark_download("mmlu_stem", repo, stem_rows)) == 0
    manifest = json.loads((hub_folder / "mmlu_stem" / "manifest.json").read_text())
    assert (manifest["items"], manifest["rows"]) == (stem_rows, 2 * stem_rows)
    assert pq.read_table(hub_folder / "mmlu_stem" / "raw.parquet").num_rows == 2 * stem_rows
    assert main(benchmark_download("mmlu", repo, 2 * stem_rows)) == 0


@pytest.mark.slow
def test_a_benchmark_whose_item_count_moved_is_refused_naming_both_counts(hub_folder, capsys, paper_config):
    repo = write_repo(hub_folder, "livebench_math", {"default": ("test", "test.parquet")})
    frame = read_fixture("livebench_math")
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), hub_folder / repo / "test.parquet")
    paper_rows = paper_config["benchmarks"]["livebench_math"]["rows"]  # 368, the paper's snapshot
    assert main(benchmark_download("livebench_math", repo, paper_rows, "default")) == 2
    *progress, refusal = capsys.readouterr().err.strip().splitlines()  # datasets' progress, then one line
    assert refusal.startswith("error: ") and not [line for line in progress if "error" in line]
    assert (
        "livebench_math" in refusal
        and f"{len(frame)} items" in refusal
        and f"rows is {paper_rows}" in refusal
    )
    assert not (hub_folder / "livebench_math").exists()
