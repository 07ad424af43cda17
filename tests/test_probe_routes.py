"""Bias-free probe routes: token selection, stock top-k, the no-bias property, files and the CLI."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pandas as pd
import pytest
import torch
import transformers

from tests.dag import PROBE_SPEC, TINY_SPEC
from workflow_scripts.errors import UserInputError
from workflow_scripts.file_formats.routes import ProbeTokens, load_routes, save_routes
from workflow_scripts.modeling.tokenizer import answer_span_mask, train_tokenizer
from workflow_scripts.modeling.toy import ToyModelSpec, build_toy_model, load_local, save_toy_base
from workflow_scripts.probe import cli as probe_cli
from workflow_scripts.probe.routes import probe_tokens, record_routes, routes_meta, tokens_sha256
from workflow_scripts.routing.hf import RoutingContext, attach, find_gates

MAX_LENGTH = 32
SMALL = ToyModelSpec(**TINY_SPEC)
SPECS = {"qwen3_moe": SMALL, "deepseek_v2": SMALL, "deepseek_v3": PROBE_SPEC}
WORDS = ["alpha", "beta", "gamma", "sum", "of", "the", "is", "code", "print", "def", "x", "y"]


def _rows(count: int, seed: int) -> list[tuple[int, str, str]]:
    """Pool rows ``(row_id, prompt, answer)``; row 2 runs past MAX_LENGTH."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(count):
        prompt = " ".join(rng.choice(WORDS, size=int(rng.integers(2, 9))))
        answer = " ".join(rng.choice(WORDS, size=int(rng.integers(2, 9))))
        rows.append((500 + i, f"{prompt} {i}?", f"{answer} = {i}"))
    rows[2] = (502, " ".join(["gamma sum"] * 20), "cut away")
    return rows


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> dict:
    """One tokenizer, a saved toy checkpoint per architecture (sharp routers) and a pool parquet."""
    root = tmp_path_factory.mktemp("probe")
    rows = _rows(12, seed=0)
    tokenizer = train_tokenizer([text for _, p, a in rows for text in (p, a)], 300)
    checkpoints = {}
    for seed, (arch, spec) in enumerate(SPECS.items()):
        model = build_toy_model(arch, spec, tokenizer, seed)
        with torch.no_grad():
            for _, gate in find_gates(model):
                gate.weight.normal_(0.0, 0.5)
        checkpoints[arch] = save_toy_base(model, tokenizer, root / arch)
    pool = root / "probe.parquet"
    frame = pd.DataFrame(rows, columns=["row_id", "prompt", "answer"])
    frame.to_parquet(pool, index=False)
    return {"root": root, "rows": rows, "tokenizer": tokenizer, "checkpoints": checkpoints, "pool": pool}


def _span_tokens(tokenizer, row: tuple[int, str, str]) -> np.ndarray:
    """Positions of the Q/A tokens among the row's first MAX_LENGTH tokens."""
    _, spans = answer_span_mask(tokenizer, row[1], row[2])
    return np.flatnonzero(np.asarray(spans[:MAX_LENGTH]) >= 0)


def test_budget_is_reached_exactly_on_span_tokens_in_pool_order(toy):
    tokenizer, rows = toy["tokenizer"], toy["rows"]
    budget = 45
    tokens = probe_tokens(tokenizer, rows, MAX_LENGTH, budget)
    assert len(tokens) == budget and tokens.counts()["total"] == budget
    assert set(np.unique(tokens.spans).tolist()) == {0, 1}
    assert (tokens.positions < MAX_LENGTH).all()
    taken = 0
    for row in rows:  # every row fully, the last one cut at the budget, in pool order
        expected = _span_tokens(tokenizer, row)[: budget - taken]
        mine = tokens.row_ids == row[0]
        np.testing.assert_array_equal(tokens.positions[mine], expected)
        _, spans = answer_span_mask(tokenizer, row[1], row[2])
        np.testing.assert_array_equal(tokens.spans[mine], np.asarray(spans)[expected])
        taken += expected.size
    assert np.all(np.diff(tokens.row_ids) >= 0)
    again = probe_tokens(tokenizer, rows, MAX_LENGTH, budget)
    assert tokens_sha256(again) == tokens_sha256(tokens)


def test_a_short_pool_is_probed_whole(toy):
    tokenizer, rows = toy["tokenizer"], toy["rows"]
    total = sum(_span_tokens(tokenizer, row).size for row in rows)
    tokens = probe_tokens(tokenizer, rows, MAX_LENGTH, 10 * total)
    assert len(tokens) == total and len(tokens.inputs) == len(rows)
    with pytest.raises(ValueError, match="repeats row ids"):
        probe_tokens(tokenizer, [rows[0], rows[0]], MAX_LENGTH, 10)


def _capture_gate_inputs(model: torch.nn.Module) -> tuple[list[list[torch.Tensor]], list]:
    """Forward pre-hooks storing what every gate is handed, per MoE layer."""
    captured: list[list[torch.Tensor]] = [[] for _ in find_gates(model)]
    hooks = [
        gate.register_forward_pre_hook(lambda _m, args, layer=layer: captured[layer].append(args[0].clone()))
        for layer, (_, gate) in enumerate(find_gates(model))
    ]
    return captured, hooks


@pytest.mark.parametrize("arch", list(SPECS))
def test_topk_is_the_stock_gate_selection_and_probs_are_a_softmax(toy, arch):
    model, tokenizer = load_local(toy["checkpoints"][arch])
    tokens = probe_tokens(tokenizer, toy["rows"], MAX_LENGTH, 60)
    captured, hooks = _capture_gate_inputs(model)
    routes = record_routes(model, tokenizer, tokens)
    for hook in hooks:
        hook.remove()
    spec = SPECS[arch]
    assert routes.topk.shape == (spec.num_moe_layers, len(tokens), spec.top_k)
    assert routes.topk.dtype == np.int16 and routes.probs.dtype == np.float16
    starts = np.flatnonzero(np.diff(tokens.row_ids, prepend=-1))
    for layer, (_, gate) in enumerate(find_gates(model)):
        logits, indices = [], []
        for row, hidden in enumerate(captured[layer]):
            with torch.no_grad():
                z, _, chosen = type(gate).forward(gate, hidden)  # the class forward: the stock gate
            end = starts[row + 1] if row + 1 < len(starts) else len(tokens)
            where = torch.from_numpy(tokens.positions[starts[row] : end].astype(np.int64))
            logits.append(z.reshape(-1, z.shape[-1])[where])
            indices.append(chosen.reshape(-1, chosen.shape[-1])[where])
        stock_topk = torch.cat(indices).sort(dim=-1).values.numpy()
        np.testing.assert_array_equal(routes.topk[layer], stock_topk)
        stock_probs = torch.softmax(torch.cat(logits).float(), dim=-1).numpy()
        np.testing.assert_allclose(routes.probs[layer].astype(np.float32), stock_probs, atol=1e-3)
    np.testing.assert_allclose(routes.probs.astype(np.float32).sum(axis=-1), 1.0, atol=5e-3)


def _biased_topk(model: torch.nn.Module, tokens: ProbeTokens, context: RoutingContext) -> np.ndarray:
    """Top-k of the probed tokens with the soft RPB hook of ``context`` attached (L, N, k)."""
    starts = np.flatnonzero(np.diff(tokens.row_ids, prepend=-1))
    ends = [*starts[1:], len(tokens)]
    prior = torch.full((1, 2, len(find_gates(model)), find_gates(model)[0][1].weight.shape[0]), 1e-4)
    prior[..., 0] = 1.0  # all prior mass on expert 0
    prior = prior / prior.sum(dim=-1, keepdim=True)
    chosen = []
    with torch.inference_mode():
        for ids, start, end in zip(tokens.inputs, starts, ends, strict=True):
            span_ids = torch.full((1, ids.size), -1, dtype=torch.long)
            positions = torch.from_numpy(tokens.positions[start:end].astype(np.int64))
            span_ids[0, positions] = torch.from_numpy(tokens.spans[start:end].astype(np.int64))
            context.set_prior(prior, span_ids)
            model(input_ids=torch.from_numpy(ids)[None], use_cache=False)
            layers = context.recorder.layer_indices()
            chosen.append(torch.stack([index[positions] for index in layers]).sort(dim=-1).values)
    return torch.cat(chosen, dim=1).numpy().astype(np.int16)


@pytest.mark.parametrize("arch", ["qwen3_moe", "deepseek_v3"])
def test_routes_are_bias_free(toy, arch):
    model, tokenizer = load_local(toy["checkpoints"][arch])
    tokens = probe_tokens(tokenizer, toy["rows"], MAX_LENGTH, 60)
    stock = record_routes(model, tokenizer, tokens)
    context = RoutingContext(mode="soft", beta=50.0)
    handle = attach(model, context)
    biased = _biased_topk(model, tokens, context)
    assert (biased == 0).any(axis=-1).all()  # the prior pulls every span token to expert 0
    assert not np.array_equal(biased, stock.topk)
    with pytest.raises(RuntimeError, match="already have a forward override"):
        record_routes(model, tokenizer, tokens)  # a probe never runs on top of a training hook
    handle.detach()
    after = record_routes(model, tokenizer, tokens)
    fresh, _ = load_local(toy["checkpoints"][arch])
    reloaded = record_routes(fresh, tokenizer, tokens)
    for routes in (after, reloaded):
        np.testing.assert_array_equal(routes.topk, stock.topk)
        np.testing.assert_array_equal(routes.probs, stock.probs)
    assert not find_gates(model)[0][1].__dict__.get("forward")


def test_save_load_round_trip(toy, tmp_path):
    model, tokenizer = load_local(toy["checkpoints"]["deepseek_v2"])
    tokens = probe_tokens(tokenizer, toy["rows"], MAX_LENGTH, 50)
    routes = record_routes(model, tokenizer, tokens)
    meta = routes_meta(routes, tokens, toy["checkpoints"]["deepseek_v2"], toy["pool"], 50, MAX_LENGTH)
    save_routes(tmp_path / "routes.npz", routes, tokens, meta, tmp_path / "meta.json")
    loaded, loaded_tokens = load_routes(tmp_path / "routes.npz")
    for name in ("topk", "probs", "moe_layers"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(routes, name))
        assert getattr(loaded, name).dtype == getattr(routes, name).dtype
    for name in ("row_ids", "positions", "spans"):
        np.testing.assert_array_equal(getattr(loaded_tokens, name), getattr(tokens, name))
    assert json.loads((tmp_path / "meta.json").read_text()) == json.loads(json.dumps(meta))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["meta.json", "routes.npz"]
    with pytest.raises(ValueError, match="no token ids"):
        record_routes(model, tokenizer, loaded_tokens)


def _run(argv: list[str]) -> None:
    """Parse ``probe ...`` with this stage only and run the command, as ``workflow_scripts.cli`` does."""
    parser = argparse.ArgumentParser()
    probe_cli.register(parser.add_subparsers(dest="stage", required=True))
    args = parser.parse_args(["probe", *argv])
    args.run(args)


def _cli(checkpoint, pool, out, tokens: int = 40) -> list[str]:
    return [
        "routes",
        "--checkpoint", str(checkpoint),
        "--pool", str(pool),
        "--tokens", str(tokens),
        "--max-length", str(MAX_LENGTH),
        "--routes", str(out / "routes.npz"),
        "--meta", str(out / "meta.json"),
    ]  # fmt: skip


def test_cli_probes_the_same_tokens_on_every_model_of_a_tokenizer(toy, tmp_path):
    metas, files = [], []
    for arch in ("qwen3_moe", "deepseek_v3"):
        _run(_cli(toy["checkpoints"][arch], toy["pool"], tmp_path / arch))
        metas.append(json.loads((tmp_path / arch / "meta.json").read_text()))
        files.append(load_routes(tmp_path / arch / "routes.npz"))
    assert metas[0]["tokens_sha256"] == metas[1]["tokens_sha256"]
    for name in ("row_ids", "positions", "spans"):
        np.testing.assert_array_equal(getattr(files[0][1], name), getattr(files[1][1], name))
    meta = metas[1]
    assert meta["token_counts"]["total"] == 40 and meta["budget_reached"]
    assert meta["token_counts"]["Q"] + meta["token_counts"]["A"] == 40
    assert (meta["num_layers"], meta["num_experts"], meta["top_k"]) == (3, 16, 4)
    assert meta["architecture"] == "deepseek_v3" and meta["max_length"] == MAX_LENGTH
    assert meta["pool"]["sha256"] and meta["checkpoint"]["sha256"]


def test_cli_errors_name_the_bad_file(toy, tmp_path):
    checkpoint, pool = toy["checkpoints"]["qwen3_moe"], toy["pool"]
    no_answer = tmp_path / "no_answer.parquet"
    pd.DataFrame({"row_id": [1], "prompt": ["x"]}).to_parquet(no_answer)
    empty = tmp_path / "empty.parquet"
    pd.DataFrame({"row_id": [], "prompt": [], "answer": []}).to_parquet(empty)
    dense = tmp_path / "dense"
    config = transformers.LlamaConfig(
        vocab_size=len(toy["tokenizer"]), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=2,
    )  # fmt: skip
    transformers.LlamaForCausalLM(config).save_pretrained(dense)
    toy["tokenizer"].save_pretrained(dense)
    cases = [
        (_cli(checkpoint, no_answer, tmp_path), f"--pool {no_answer}: cannot read columns"),
        (_cli(checkpoint, empty, tmp_path), f"--pool {empty} has no rows"),
        (_cli(dense, pool, tmp_path), f"--checkpoint {dense}: not a supported MoE checkpoint"),
        (_cli(tmp_path / "missing", pool, tmp_path), "--checkpoint .*missing: not a supported MoE"),
        (_cli(checkpoint, pool, tmp_path, tokens=0), "--tokens and --max-length must be positive"),
    ]
    for argv, message in cases:
        with pytest.raises(UserInputError, match=message):
            _run(argv)
    assert not (tmp_path / "routes.npz").exists()
