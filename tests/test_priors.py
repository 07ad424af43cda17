"""Frozen-base priors: span means, the batched pass, meta checks, statistics and the CLI."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pandas as pd
import pytest
import torch

import workflow_scripts.cli as cli
from tests.dag import TINY_SPEC
from workflow_scripts.errors import UserInputError
from workflow_scripts.families import ARCHITECTURES
from workflow_scripts.file_formats.prior import check_prior_file, check_prior_matches, load_prior
from workflow_scripts.modeling.tokenizer import answer_span_mask, train_tokenizer
from workflow_scripts.modeling.toy import (
    ToyModelSpec,
    build_toy_model,
    load_local,
    moe_layer_indices,
    save_toy_base,
)
from workflow_scripts.priors.compute import compute_prior, gather_rows, prior_meta, span_means
from workflow_scripts.priors.stats import prior_stats

MAX_LENGTH = 40
SPEC = ToyModelSpec(**TINY_SPEC)
WORDS = ["alpha", "beta", "gamma", "delta", "sum", "of", "the", "is", "code", "print", "def", "x", "y"]


def _rows(count: int, seed: int) -> list[tuple[str, str]]:
    """(prompt, answer) pairs of varied lengths; some run past MAX_LENGTH tokens."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(count):
        prompt = " ".join(rng.choice(WORDS, size=int(rng.integers(1, 12))))
        answer = " ".join(rng.choice(WORDS, size=int(rng.integers(1, 12))))
        rows.append((f"{prompt} {i}?", f"{answer} = {i * 3}"))
    rows[3] = (" ".join(["gamma delta"] * 30), "the answer is cut away")  # A truncated to nothing
    rows[5] = ("", "an empty prompt: no Q tokens")
    return rows


@pytest.fixture(scope="session")
def toy(tmp_path_factory) -> dict:
    """A tiny tokenizer, one saved toy base per architecture, and a split parquet of 20 rows."""
    root = tmp_path_factory.mktemp("priors")
    rows = _rows(20, seed=1)
    texts = [text for pair in [*rows, *_rows(30, seed=2)] for text in pair]
    tokenizer = train_tokenizer(texts, 320)
    bases = {}
    for seed, architecture in enumerate(ARCHITECTURES):
        model = build_toy_model(architecture, SPEC, tokenizer, seed)
        bases[architecture] = save_toy_base(model, tokenizer, root / architecture)
    split = root / "train.parquet"
    frame = pd.DataFrame(
        {
            "row_id": np.arange(100, 100 + len(rows), dtype=np.int64),
            "prompt": [p for p, _ in rows],
            "answer": [a for _, a in rows],
        }
    )
    frame.to_parquet(split, index=False)
    return {"root": root, "rows": rows, "bases": bases, "split": split, "frame": frame}


def _naive_span_means(probs: np.ndarray, span_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    batch, length, layers, experts = probs.shape
    means = np.full((batch, 2, layers, experts), 1.0 / experts)
    counts = np.zeros((batch, 2), dtype=np.int64)
    for b in range(batch):
        for s in range(2):
            total = np.zeros((layers, experts))
            for t in range(length):
                if span_ids[b, t] == s:
                    total += probs[b, t]
                    counts[b, s] += 1
            if counts[b, s]:
                means[b, s] = total / counts[b, s]
    return means, counts


def test_span_means_matches_a_token_loop() -> None:
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(4, 9, 3, 6))
    probs = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    span_ids = rng.integers(-1, 2, size=(4, 9))
    span_ids[2] = np.where(span_ids[2] == 1, 0, span_ids[2])  # sample 2: no A tokens
    span_ids[3] = -1  # sample 3: no span tokens at all
    probs[0, span_ids[0] < 0] = np.nan  # no-span tokens must not leak in
    means, counts = span_means(torch.from_numpy(probs), torch.from_numpy(span_ids))
    expected, expected_counts = _naive_span_means(np.nan_to_num(probs), span_ids)
    assert means.shape == (4, 2, 3, 6) and counts.shape == (4, 2)
    np.testing.assert_array_equal(counts.numpy(), expected_counts)
    np.testing.assert_allclose(means.numpy(), expected, rtol=0, atol=1e-12)
    assert counts[2, 1] == 0 and counts[3].tolist() == [0, 0]
    np.testing.assert_array_equal(means[2, 1].numpy(), np.full((3, 6), 1 / 6))
    np.testing.assert_array_equal(means[3].numpy(), np.full((2, 3, 6), 1 / 6))


def _reference_prior(model, tokenizer, rows, max_length: int) -> tuple[np.ndarray, np.ndarray]:
    """Each row alone, unpadded: softmax of the router logits, mean over its Q and A positions."""
    per_row, counts = [], []
    model.eval()
    for prompt, answer in rows:
        ids, spans = answer_span_mask(tokenizer, prompt, answer)
        ids, spans = ids[:max_length], np.asarray(spans[:max_length])
        with torch.inference_mode():
            out = model(input_ids=torch.tensor([ids]), output_router_logits=True)
        probs = np.stack([torch.softmax(z.double(), dim=-1).numpy() for z in out.router_logits], axis=1)
        experts = probs.shape[-1]
        per_row.append(
            [
                probs[spans == s].mean(axis=0)
                if (spans == s).any()
                else np.full(probs.shape[1:], 1 / experts)
                for s in (0, 1)
            ]
        )
        counts.append([(spans == 0).sum(), (spans == 1).sum()])
    return np.asarray(per_row), np.asarray(counts)


def test_compute_prior_matches_per_row_reference(toy, tmp_path) -> None:
    model, tokenizer = load_local(toy["bases"]["deepseek_v3"])
    rows = toy["rows"]
    first, second = tmp_path / "a.npy", tmp_path / "b.npy"
    result = compute_prior(model, tokenizer, rows, first, batch_size=6, max_length=MAX_LENGTH, progress=False)
    compute_prior(model, tokenizer, rows, second, batch_size=6, max_length=MAX_LENGTH, progress=False)
    prior = load_prior(first)
    layers = len(moe_layer_indices(model))
    assert isinstance(prior, np.memmap) and not prior.flags.writeable
    assert prior.shape == (len(rows), 2, layers, SPEC.num_experts) and prior.dtype == np.float32
    assert result["shape"] == list(prior.shape)
    np.testing.assert_allclose(prior.sum(axis=-1), 1.0, atol=1e-5)
    expected, counts = _reference_prior(model, tokenizer, rows, MAX_LENGTH)
    np.testing.assert_allclose(prior, expected, rtol=0, atol=1e-5)
    np.testing.assert_array_equal(result["token_counts"], counts)
    assert counts[3, 1] == 0 and counts[5, 0] == 0  # the truncated answer, the empty prompt
    assert first.read_bytes() == second.read_bytes()
    picked = gather_rows(prior, [5, 0, 5])
    np.testing.assert_array_equal(picked, np.asarray(prior)[[5, 0, 5]])
    with pytest.raises(IndexError):
        gather_rows(prior, [len(rows)])


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_cli_per_architecture(toy, tmp_path, monkeypatch, architecture) -> None:
    base, split = toy["bases"][architecture], toy["split"]
    out = {name: tmp_path / name for name in ("prior.npy", "meta.json", "stats.json", "prov.json")}
    argv = [
        "priors", "compute", "--model", str(base), "--split", str(split),
        "--prior", str(out["prior.npy"]), "--meta", str(out["meta.json"]), "--stats", str(out["stats.json"]),
        "--batch-size", "8", "--max-length", str(MAX_LENGTH), "--clip-eps", "0.05", "--clip-c", "5.0",
        "--provenance", str(out["prov.json"]),
    ]  # fmt: skip
    assert cli.main(argv) == 0
    model, tokenizer = load_local(base)
    layers = moe_layer_indices(model)
    prior = load_prior(out["prior.npy"])
    assert prior.shape == (len(toy["rows"]), 2, len(layers), SPEC.num_experts)
    np.testing.assert_allclose(prior.sum(axis=-1), 1.0, atol=1e-5)
    meta = json.loads(out["meta.json"].read_text())
    assert meta["moe_layers"] == layers and meta["shape"] == list(prior.shape)
    assert meta["row_ids"] == toy["frame"]["row_id"].tolist()
    assert meta["architecture"] == architecture and meta["max_length"] == MAX_LENGTH
    assert (meta["clip_eps"], meta["clip_c"]) == (0.05, 5.0)
    assert meta["token_count_summary"]["A"]["empty"] == 1 and meta["token_count_summary"]["Q"]["empty"] == 1
    assert len(meta["token_counts"]["Q"]) == len(toy["rows"])
    check_prior_matches(meta, split, base, tokenizer.chat_template)
    assert meta["prior"]["sha256"] == hashlib.sha256(out["prior.npy"].read_bytes()).hexdigest()
    assert check_prior_file(meta, out["prior.npy"], "base") == "base"
    stats = json.loads(out["stats.json"].read_text())
    assert stats == json.loads(json.dumps(prior_stats(prior, 0.05, 5.0)))
    provenance = json.loads(out["prov.json"].read_text())
    assert set(provenance["inputs"]) == {"model", "split"}
    assert set(provenance["outputs"]) == {"prior", "meta", "stats"}


def test_cli_rejects_bad_arguments(toy, tmp_path, monkeypatch, capsys) -> None:
    bad_split = tmp_path / "bad.parquet"
    pd.DataFrame({"prompt": ["p"], "answer": ["a"]}).to_parquet(bad_split)
    common = ["--prior", str(tmp_path / "p.npy"), "--meta", str(tmp_path / "m.json")]
    common += ["--stats", str(tmp_path / "s.json"), "--max-length", "16"]
    base = str(toy["bases"]["qwen3_moe"])
    assert cli.main(["priors", "compute", "--model", base, "--split", str(bad_split), *common,
                     "--batch-size", "2"]) == 2  # fmt: skip
    assert "row_id" in capsys.readouterr().err
    assert cli.main(["priors", "compute", "--model", base, "--split", str(toy["split"]), *common,
                     "--batch-size", "0"]) == 2  # fmt: skip
    assert not (tmp_path / "p.npy").exists()


def test_check_prior_matches_names_the_mismatch(toy, tmp_path) -> None:
    base, split = toy["bases"]["deepseek_v2"], toy["split"]
    model, tokenizer = load_local(base)
    rows = toy["rows"][:4]
    result = compute_prior(model, tokenizer, rows, tmp_path / "p.npy", 4, MAX_LENGTH, progress=False)
    meta = prior_meta(result, [0, 1, 2, 3], split, base, tokenizer.chat_template, MAX_LENGTH, 4, 0.05, 5.0)
    check_prior_matches(meta, split, base, tokenizer.chat_template)

    other_split = tmp_path / "other.parquet"
    toy["frame"].iloc[:-1].to_parquet(other_split, index=False)
    with pytest.raises(UserInputError, match="split") as error:
        check_prior_matches(meta, other_split, base, tokenizer.chat_template)
    assert "model" not in str(error.value) and "chat template" not in str(error.value)

    with pytest.raises(UserInputError, match="model") as error:
        check_prior_matches(meta, split, toy["bases"]["qwen3_moe"], tokenizer.chat_template)
    assert "split" not in str(error.value) and "chat template" not in str(error.value)

    with pytest.raises(UserInputError, match="chat template") as error:
        check_prior_matches(meta, split, base, tokenizer.chat_template + " ")
    assert "split (" not in str(error.value) and "model (" not in str(error.value)

    with pytest.raises(UserInputError, match="lacks"):
        check_prior_matches({"split": meta["split"]}, split, base, tokenizer.chat_template)


def test_stats_match_independent_numpy(tmp_path) -> None:
    rng = np.random.default_rng(3)
    experts, eps, c = 8, 0.05, 5.0
    prior = rng.dirichlet(np.full(experts, 0.3), size=(23, 2, 3)).astype(np.float32)
    prior[4, 1] = 1.0 / experts  # an empty span's uniform row
    path = tmp_path / "prior.npy"
    np.save(path, prior)
    stats = prior_stats(load_prior(path), eps, c, chunk_rows=5)

    p = prior.astype(np.float64)
    clipped = np.clip(p, eps / experts, c / experts)
    log_c = np.log(clipped / clipped.sum(axis=-1, keepdims=True))
    bias = log_c - log_c.mean(axis=-1, keepdims=True)
    upper = prior >= np.float32(c / experts)
    lower = prior <= np.float32(eps / experts)
    assert upper.any() and lower.any()
    assert stats["bias_sd"] == pytest.approx(bias.std(axis=-1).mean(), rel=1e-6)
    assert stats["bias_range"] == pytest.approx((bias.max(-1) - bias.min(-1)).mean(), rel=1e-6)
    assert stats["clamp_upper_fraction"] == pytest.approx(upper.mean(), abs=1e-12)
    assert stats["clamp_lower_fraction"] == pytest.approx(lower.mean(), abs=1e-12)
    for s, name in enumerate(("Q", "A")):
        assert stats["spans"][name]["bias_sd"] == pytest.approx(bias[:, s].std(axis=-1).mean(), rel=1e-6)
        assert stats["spans"][name]["clamp_upper_fraction"] == pytest.approx(upper[:, s].mean(), abs=1e-12)
    assert stats["cells"] == 23 * 2 * 3 and stats["entries"] == 23 * 2 * 3 * experts


def test_prior_modified_after_its_meta_is_refused(toy, tmp_path) -> None:
    base, split = toy["bases"]["deepseek_v3"], toy["split"]
    model, tokenizer = load_local(base)
    path = tmp_path / "prior.npy"
    result = compute_prior(model, tokenizer, toy["rows"][:4], path, 4, MAX_LENGTH, progress=False)
    args = (result, [0, 1, 2, 3], split, base, tokenizer.chat_template, MAX_LENGTH, 4, 0.05, 5.0)
    meta = prior_meta(*args, prior_path=path)
    assert meta["prior"]["bytes"] == path.stat().st_size
    assert check_prior_file(meta, path) == "base" == check_prior_file(meta, path, "base")

    prior = np.load(path)
    prior[1, 0, 0, ::-1] = prior[1, 0, 0].copy()  # same shape, dtype and row sums: only the bytes differ
    np.save(path, prior)
    for kind in (None, "base"):
        with pytest.raises(UserInputError, match="modified") as error:
            check_prior_file(meta, path, kind)
        assert str(path) in str(error.value)

    with pytest.raises(UserInputError, match="lacks the checksum") as error:
        check_prior_file(prior_meta(*args), path)  # a meta written without the file's checksum
    assert str(path) in str(error.value)
    with pytest.raises(UserInputError, match="unknown prior kind"):
        check_prior_file(meta, path, "shuffled_sideways")
