"""What the CI's rehearsal reads in place of the hub: real-architecture bases, sources in the hubs' layouts.

The three bases are toy checkpoints of the paper's architectures, written by the pipeline's own
``models toy-base`` with each family's tokenizer as its hub ships it and one MoE layer more than the
rehearsal keeps, and served over HTTP by the hub stand-in (tests/hub_server.py) under their real
repository ids, so the rehearsal's download cuts them as it cuts the hub's. The training sources and
benchmarks are dataset folders in each hub repository's layout (a README's configs over JSON Lines
or parquet), read by ``datasets`` from disk under ``fakehub/`` as it reads a hub repository; their
rows are the toy generators', in the raw schemas the readers take.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from tests.dag import ROOT
from tests.hub_server import Repo, commit_of
from workflow_scripts import dag_inputs, registry
from workflow_scripts.chat_sources import toy
from workflow_scripts.evaluate.items import item_count
from workflow_scripts.evaluate.toy_benchmarks import toy_benchmark_rows

#: Each family's stand-in: head size 32 and DeepSeek's 576-wide MLA latent (512 + 64), which vLLM's
#: CPU kernels take; one dense layer first (none for Qwen3) and three MoE layers, one more than kept.
ARCHITECTURES = {"moonlight": "deepseek_v3", "deepseek_v2_lite": "deepseek_v2", "qwen3_30b": "qwen3_moe"}
SHARED = {"hidden_size": 64, "num_heads": 2, "intermediate_size": 128, "moe_intermediate_size": 32,
          "top_k": 2, "max_position_embeddings": 1024}  # fmt: skip
SPECS = {
    "moonlight": {**SHARED, "num_layers": 4, "first_dense_layers": 1, "num_experts": 16, "shared_experts": 1,
                  "kv_lora_rank": 512, "qk_rope_head_dim": 64},
    "deepseek_v2_lite": {**SHARED, "num_layers": 4, "first_dense_layers": 1, "num_experts": 16,
                         "shared_experts": 1, "kv_lora_rank": 512, "qk_rope_head_dim": 64},
    "qwen3_30b": {**SHARED, "num_layers": 3, "first_dense_layers": 0, "num_experts": 24, "shared_experts": 0},
}  # fmt: skip
#: The toy registry with a short pretraining: the rehearsal checks the machinery, not the bases'
#: routing structure.
TOY = registry.load_config(registry.shipped_config_files(ROOT, toy=True))
TOY["toy_base"]["steps"] = 20
#: Rows of each training source's subsets, in its hub file layout.
SOURCE_ROWS = {("glm51", "main"): 1500, ("glm51", "Math"): 500, ("openr1", "default"): 300}
BENCHMARK_ROWS = 8


def build_base(model: str, folder: Path, python: str = sys.executable) -> Path:
    """``models toy-base`` of ``model``'s architecture at its stand-in sizes, into ``folder``."""
    command = [
        python, "-m", "workflow_scripts", "models", "toy-base", "--architecture", ARCHITECTURES[model],
        "--spec", json.dumps(SPECS[model]), "--pretrain", dag_inputs.toy_pretraining(TOY, model),
        "--out", str(folder), "--report", str(folder.with_suffix(".report.json")),
    ]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return folder


def served_models(config: dict[str, Any], bases: dict[str, Path]) -> list[Repo]:
    """The bases under the registry's repository ids, ``main`` at the stand-in commit."""
    repos = []
    for model, folder in bases.items():
        repo = config["models"][model]["hub"]["repo"]
        repos.append(Repo("model", repo, refs={"main": commit_of(repo)}, files=folder))
    return repos


def _readme(folder: Path, configs: list[tuple[str, str, str]]) -> None:
    """The hub dataset card's ``configs``: (config name, split, data file) each."""
    entries = [
        {"config_name": name, "data_files": [{"split": split, "path": path}]} for name, split, path in configs
    ]
    (folder / "README.md").write_text(f"---\n{yaml.safe_dump({'configs': entries})}---\n")


def write_sources(workdir: Path, config: dict[str, Any]) -> dict[str, Any]:
    """The training sources and benchmarks under ``workdir/fakehub``; the overlay that reads them there.

    GLM-5.1's subsets are JSON Lines as its hub has them, OpenR1's and the benchmarks' parquet.
    Each benchmark's ``rows`` is the item count of what is written, which its download checks.
    """
    overlay: dict[str, Any] = {"datasets": {}, "benchmarks": {}}
    for name, dataset in config["datasets"].items():
        folder = workdir / "fakehub" / name
        folder.mkdir(parents=True)
        files = []
        for subset in dataset["subsets"]:
            rows = toy.generate(
                dataset["format"], subset, SOURCE_ROWS[(name, subset)], seed=0, bad_fraction=0.1
            )
            if dataset["format"] == "glm_sharegpt":
                path = f"{subset}.jsonl"
                (folder / path).write_text("".join(json.dumps(row) + "\n" for row in rows.to_pylist()))
            else:
                path = f"{subset}/{dataset['hub']['split']}.parquet"
                (folder / subset).mkdir()
                pq.write_table(rows, folder / path)
            files.append((subset, dataset["hub"]["split"], path))
        _readme(folder, files)
        overlay["datasets"][name] = {"hub": {"repo": f"fakehub/{name}"}}
    for name, benchmark in config["benchmarks"].items():
        folder = workdir / "fakehub" / name
        hub = benchmark["hub"]
        (folder / hub["config"]).mkdir(parents=True)
        frame = toy_benchmark_rows(name, BENCHMARK_ROWS, seed=config["evaluation"]["toy_benchmark"]["seed"])
        path = f"{hub['config']}/{hub['split']}.parquet"
        pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), folder / path)
        _readme(folder, [(hub["config"], hub["split"], path)])
        count = item_count(name, frame.to_dict("records"))
        overlay["benchmarks"][name] = {"hub": {"repo": f"fakehub/{name}"}, "rows": count}
    return overlay
