"""Generation through a real vLLM engine on CPU (vllm-cpu), on checkpoints the training environment wrote.

Runs in the evaluation environment (``bash tests/run_vllm_cpu.sh``: vLLM 0.32, transformers 5.19);
the toy checkpoints are written by ``models toy-base`` in the training interpreter
(``$RPB_WRITER_PYTHON``, default ``.venv/bin/python``: transformers 5.24), so every test here
also loads a tokenizer and weights across those versions, as the pipeline does.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="needs the evaluation environment: bash tests/run_vllm_cpu.sh")

import pandas as pd  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from vllm import LLM, SamplingParams  # noqa: E402

from tests.conftest import load_config  # noqa: E402
from tests.dag import TINY_SPEC  # noqa: E402
from workflow_scripts import dag_inputs  # noqa: E402
from workflow_scripts.cli import main  # noqa: E402
from workflow_scripts.evaluate.generation import (  # noqa: E402
    GENERATION_COLUMNS,
    Sampling,
    generate_hf,
    parse_vllm_outputs,
    stop_ids,
    vllm_sampling_kwargs,
)
from workflow_scripts.families import ARCHITECTURES  # noqa: E402
from workflow_scripts.modeling.toy import load_local  # noqa: E402

pytestmark = pytest.mark.vllm

ROOT = Path(__file__).resolve().parents[1]
WRITER = os.environ.get("RPB_WRITER_PYTHON", str(ROOT / ".venv" / "bin" / "python"))
# Head size 32 (hidden / heads): vLLM's CPU attention takes head sizes 32..512. DeepSeek's MLA
# latent is kv_lora_rank + qk_rope_head_dim = 576, the only size its CPU MLA kernels compile for.
SPEC = {**TINY_SPEC, "hidden_size": 64, "num_heads": 2, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
        "max_position_embeddings": 1024}  # fmt: skip
# CPU engine: float32 as transformers loads the toy checkpoints, no torch.compile (eager), a
# 256 MiB KV cache instead of a share of the machine's memory. The paper's config.yaml keeps
# its GPU engine (bfloat16, 16k context).
ENGINE = {"dtype": "float32", "max_model_len": 1024, "enforce_eager": True, "kv_cache_memory_bytes": 1 << 28}
# MLA (DeepSeek V2/V3): where the CPU has AMX vLLM picks AMX_MLA, which takes bfloat16 only; and
# with enforce_eager (custom ops on) vllm-cpu 0.32's C++ RoPE kernel rotates only the first head
# of MLA's (tokens, heads, rope_dim) query, so the test asks for torch's RoPE instead.
MLA_ENGINE = {
    **ENGINE,
    "attention_backend": "CPU_MLA",
    "compilation_config": {"custom_ops": ["all", "-rotary_embedding"]},
}
ENGINES = {"deepseek_v3": MLA_ENGINE, "deepseek_v2": MLA_ENGINE, "qwen3_moe": ENGINE}
BENCHMARKS = ("gsm8k", "mmlu_pro", "humaneval")
NEW_TOKENS = 16
LIMITS = {"timeout_s": 5, "memory_mb": 1024, "file_size_mb": 16, "open_files": 64, "processes": 16,
          "output_bytes": 65536, "allow_unisolated": False}  # fmt: skip
IDENTITY = {"model": "qwen3_30b", "corpus": "math20k", "condition": "rpb", "seed": 42}


def _writer_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    """One toy base per architecture, written by the toy pipeline's own command in the training env.

    Pretrained as the toy profile does (on a smaller corpus), so that attention and routing are
    far from uniform: on near-random weights a wrong RoPE moves log-probabilities by only 1e-3.
    The qwen3_moe base also answers in the chat format and stops with EOS after an answer.
    """
    root = tmp_path_factory.mktemp("vllm_checkpoints")
    # The toy Moonlight's pretraining settings (dag_inputs.toy_pretraining: no load balancing) with
    # a smaller corpus and routing report than the profile's: tokenizer training and the report
    # dominate the time of a short run, and neither changes what vLLM is tested on.
    toy_base = json.loads(dag_inputs.toy_pretraining(load_config(toy=True), "moonlight"))
    pretrain = {**toy_base, "corpus_rows": {"main": 400, "Math": 200}, "report_rows": 8}
    paths = {}
    for architecture in ARCHITECTURES:
        paths[architecture] = root / architecture
        command = [
            WRITER, "-m", "workflow_scripts", "models", "toy-base", "--architecture", architecture,
            "--spec", json.dumps(SPEC), "--pretrain", json.dumps(pretrain),
            "--out", str(paths[architecture]), "--report", str(root / f"{architecture}.json"),
        ]  # fmt: skip
        done = subprocess.run(command, cwd=ROOT, env=_writer_env(), capture_output=True, text=True)
        assert done.returncode == 0, f"{WRITER} could not write the {architecture} toy base:\n{done.stderr}"
    return paths


#: The tokenizer class each toy's ``tokenizer_config.json`` names, as its hub model's does:
#: Moonlight's remote-code tiktoken class, DeepSeek-V2-Lite's and Qwen3's own names.
TOKENIZER_CLASSES = {"deepseek_v3": "TikTokenTokenizer", "deepseek_v2": "LlamaTokenizerFast",
                     "qwen3_moe": "Qwen2Tokenizer"}  # fmt: skip
#: The class transformers loads for it, in this environment (5.19) as in training's (5.24): a
#: ``LlamaTokenizer`` name over a byte-level ``tokenizer.json`` is read as the file is.
LOADED_CLASSES = {"deepseek_v3": "TikTokenTokenizer", "deepseek_v2": "TokenizersBackend",
                  "qwen3_moe": "Qwen2Tokenizer"}  # fmt: skip


def test_checkpoints_come_from_another_transformers(checkpoints):
    """The writer is transformers 5.24; this reader is 5.19; each toy names its hub's tokenizer class."""
    for architecture, path in checkpoints.items():
        written = json.loads((path / "config.json").read_text())["transformers_version"]
        assert written != transformers.__version__, f"{WRITER} is not the training environment"
        tokenizer_class = json.loads((path / "tokenizer_config.json").read_text())["tokenizer_class"]
        assert tokenizer_class == TOKENIZER_CLASSES[architecture]


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_this_reader_loads_each_tokenizer_as_the_writer_does(checkpoints, architecture):
    """Class and text round trip, DeepSeek-V2's byte-level file under its hub's Llama name included."""
    _, tokenizer = load_local(checkpoints[architecture])
    assert type(tokenizer).__name__ == LOADED_CLASSES[architecture]
    text = "naïve words, spaced out: 12 + 30"
    assert tokenizer.decode(tokenizer(text, add_special_tokens=False)["input_ids"]) == text


# ----------------------------------------------------------------------------- backend agreement


def _agreement_prompts(tokenizer) -> list[str]:
    def chat(question: str) -> str:
        turns = [{"role": "user", "content": question}]
        return tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=True)

    # Phrased as the pretraining corpus phrases them: the third ends where its answers end (EOS).
    question = "Ada buys 6 lamps for $8$ dollars each and sells each for $11$ dollars. "
    question += "What is the total profit in dollars?"
    return [
        chat(question),
        chat("Write a Python function `add(a, b)` that returns the sum."),
        chat(question) + "## Solution\n\nA quick estimate agrees. \n\nThe answer is $\\boxed{18}$.",
        chat("What is 2 + 3?") + "The answer is $\\boxed{5}$.",
    ]


def _hf_greedy(model, ids: list[int], stops: list[int]) -> tuple[list[int], list[float]]:
    """transformers' greedy continuation of one prompt up to a stop token; each token's log-probability."""
    with torch.no_grad():
        out = model.generate(
            input_ids=torch.tensor([ids]), do_sample=False, max_new_tokens=NEW_TOKENS, eos_token_id=stops,
            return_dict_in_generate=True, output_logits=True, pad_token_id=model.config.pad_token_id,
        )  # fmt: skip
    new = out.sequences[0, len(ids) :].tolist()
    logprobs = [
        torch.log_softmax(step[0].float(), -1)[token].item()
        for step, token in zip(out.logits, new, strict=True)
    ]
    return new, logprobs


#: float32 rounding between the two backends' log-probs: vLLM's MLA absorbs the key and value
#: up-projections into the query and output ones, which reorders the sums; over the toys' layers
#: that moved a log-prob near -1 by 1.2e-4 (DeepSeek-V3, in CI). A wrong weight, mask or scale
#: moves them by 1e-2 or more.
LOGPROB_TOLERANCE = 5e-4


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_greedy_decoding_agrees_with_transformers(checkpoints, architecture):
    """Temperature 0: vLLM and transformers ``generate`` choose the same tokens with the same log-probs.

    Where they may differ, and why this test still holds: both run float32 here; in bfloat16
    (the paper's GPU dtype) rounding differs between vLLM's fused kernels (fused MoE, paged and
    MLA attention, absorbed MLA weights) and transformers' eager modules, so near-ties can flip a
    greedy token and the continuations then diverge. Sampled decoding (temperature 0.6) never
    matches: vLLM draws from one generator per request seeded with the repeat seed, transformers
    from torch's global generator, so a seed fixes each backend's samples, not the same samples.
    """
    model, tokenizer = load_local(checkpoints[architecture])
    prompts = _agreement_prompts(tokenizer)
    encoded = [tokenizer(prompt, add_special_tokens=False)["input_ids"] for prompt in prompts]
    # Both backends stop where the pipeline stops them: eos or the chat template's end of turn.
    stops = stop_ids(tokenizer)
    # 1e-6: transformers' sampler needs a positive temperature; vLLM samples greedily below 1e-5.
    greedy = Sampling(temperature=1e-6, top_p=1.0, max_new_tokens=NEW_TOKENS, seeds=(0,))
    llm = LLM(model=str(checkpoints[architecture]), trust_remote_code=True, **ENGINES[architecture])
    try:
        params = SamplingParams(**vllm_sampling_kwargs(greedy, 0, stops), logprobs=0)
        outputs = llm.generate(
            prompts, params, use_tqdm=False, tokenization_kwargs={"add_special_tokens": False}
        )
    finally:
        del llm
        gc.collect()
    for prompt_ids, output in zip(encoded, outputs, strict=True):
        assert output.prompt_token_ids == prompt_ids, "vLLM tokenized the prompt differently"
        sample = output.outputs[0]
        hf_tokens, hf_logprobs = _hf_greedy(model, prompt_ids, stops)
        assert list(sample.token_ids) == hf_tokens
        vllm_logprobs = [
            step[token].logprob for step, token in zip(sample.logprobs, sample.token_ids, strict=True)
        ]
        assert vllm_logprobs == pytest.approx(hf_logprobs, abs=LOGPROB_TOLERANCE)
    # The same rows through the project's two backends (text, token count, finish reason).
    assert parse_vllm_outputs(outputs) == generate_hf(model, tokenizer, prompts, greedy, batch_size=4)[0]
    if architecture == "qwen3_moe":
        assert any(o.outputs[0].finish_reason == "stop" for o in outputs), "no prompt reached EOS"


# ----------------------------------------------------------------------------- generate --backend vllm


@pytest.fixture(scope="module")
def evaluated(checkpoints, tmp_path_factory) -> Path:
    """Toy items -> generations by hf, by vLLM with one engine and with two -> vLLM's scores."""
    root = tmp_path_factory.mktemp("vllm_eval")
    config = load_config(toy=False)
    for name in BENCHMARKS:
        raw, items = root / f"{name}.raw.parquet", root / f"{name}.items.parquet"
        assert main(["evaluate", "fixture", "--benchmark", name, "--out", str(raw)]) == 0
        assert main([
            "evaluate", "items", "--benchmark", name, "--raw", str(raw),
            "--spec", json.dumps(config["benchmarks"][name]), "--shuffle-seed", "42", "--limit", "2",
            "--out", str(items),
        ]) == 0  # fmt: skip
    items = [str(root / f"{name}.items.parquet") for name in BENCHMARKS]
    # The paper's sampling (F.3: temperature 0.6, top-p 0.95, five repeats seeded 42..46), shorter.
    sampling = {**config["evaluation"], "max_new_tokens": NEW_TOKENS}
    checkpoint = str(checkpoints["qwen3_moe"])
    for name, backend, engines in (("hf", "hf", 1), ("vllm", "vllm", 1), ("vllm_dp2", "vllm", 2)):
        assert main([
            "evaluate", "generate", "--checkpoint", checkpoint, "--items", *items,
            "--sampling", json.dumps(sampling), "--backend", backend, "--batch-size", "4",
            "--data-parallel", str(engines), "--engine", json.dumps(ENGINES["qwen3_moe"]),
            "--out", str(root / f"{name}.parquet"),
        ]) == 0  # fmt: skip
    assert main([
        "evaluate", "score", "--items", *items, "--generations", str(root / "vllm.parquet"),
        "--repeats", str(config["evaluation"]["repeats"]), "--limits", json.dumps(LIMITS), "--workers", "2",
        "--math-timeout", "10", "--identity", json.dumps(IDENTITY), "--scores", str(root / "scores.parquet"),
        "--summary", str(root / "summary.json"),
    ]) == 0  # fmt: skip
    return root


def test_vllm_rows_have_the_hf_schema(evaluated):
    schema = pq.read_schema(evaluated / "vllm.parquet")
    assert schema.names == list(GENERATION_COLUMNS)
    assert schema.equals(pq.read_schema(evaluated / "hf.parquet"))


def test_every_item_is_sampled_once_per_repeat_seed(evaluated):
    generations = pd.read_parquet(evaluated / "vllm.parquet")
    items = pd.concat([pd.read_parquet(evaluated / f"{name}.items.parquet") for name in BENCHMARKS])
    assert len(generations) == 5 * len(items)
    pairs = sorted(set(zip(generations["repeat"], generations["seed"], strict=True)))
    assert pairs == [(r, 42 + r) for r in range(5)]
    assert not generations.duplicated(["benchmark", "item_id", "repeat"]).any()
    assert set(generations["finish_reason"]) <= {"stop", "length"}
    assert generations["completion_tokens"].between(1, NEW_TOKENS).all()
    capped = generations["finish_reason"] == "length"
    assert (generations.loc[capped, "completion_tokens"] == NEW_TOKENS).all()
    by_repeat = generations.pivot(index=["benchmark", "item_id"], columns="repeat", values="response")
    assert by_repeat.nunique(axis=1).gt(1).any(), "five seeds sampled five identical response sets"


def test_data_parallel_engines_merge_to_the_single_engine_result(evaluated):
    """Two engines, each on a contiguous block of prompts, give the rows of one engine, in order.

    vLLM seeds each request's own generator, so a response depends on its prompt and seed only,
    not on which engine ran it or beside which other requests.
    """
    single = pd.read_parquet(evaluated / "vllm.parquet")
    pd.testing.assert_frame_equal(pd.read_parquet(evaluated / "vllm_dp2.parquet"), single)


def test_vllm_generations_are_graded(evaluated):
    scores = pd.read_parquet(evaluated / "scores.parquet")
    generations = pd.read_parquet(evaluated / "vllm.parquet")
    keys = ["benchmark", "item_id", "repeat", "seed"]
    pd.testing.assert_frame_equal(
        scores[keys].sort_values(keys, ignore_index=True),
        generations[keys].sort_values(keys, ignore_index=True),
    )
    assert scores["score"].between(0, 1).all()
    summary = json.loads((evaluated / "summary.json").read_text())
    assert sorted(summary["benchmarks"]) == sorted(BENCHMARKS) and summary["repeats"] == 5
    assert all(len(entry["repeat_scores"]) == 5 for entry in summary["benchmarks"].values())
