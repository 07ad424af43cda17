"""Prior shuffles (within-community, global) and their validations (Table 13, Appendix B.2)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import workflow_scripts.cli as cli
from workflow_scripts.errors import UserInputError
from workflow_scripts.file_formats.prior import check_prior_file
from workflow_scripts.priors.shuffle import (
    apply_permutations,
    check_permutations,
    global_permutations,
    permute_experts,
    within_community_permutations,
)
from workflow_scripts.priors.validation import (
    ABS_DELTA_BINS,
    prior_side_strength,
    within_shuffle_community_check,
)
from workflow_scripts.records import file_sha256

EPS, C = 0.05, 5.0


def random_prior(n: int, layers: int, experts: int, seed: int = 0) -> np.ndarray:
    """A random float32 ``(n, 2, L, E)`` prior whose rows sum to one."""
    rng = np.random.default_rng(seed)
    return rng.dirichlet(np.full(experts, 0.3), size=(n, 2, layers)).astype(np.float32)


def random_partition(layers: int, experts: int, seed: int = 0) -> np.ndarray:
    """``(L, E)`` labels with a few communities of uneven size and one singleton per layer."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 4, size=(layers, experts))
    labels[:, 0] = 99  # a singleton
    return labels


def planted_prior(n: int, layers: int, experts: int = 16, blocks: int = 4, seed: int = 0):
    """Rows putting 90% of their mass on one of ``blocks`` expert blocks; returns (prior, partition)."""
    rng = np.random.default_rng(seed)
    size = experts // blocks
    block = rng.integers(0, blocks, size=(n, 2, layers))  # (n, 2, L)
    prior = rng.dirichlet(np.ones(experts), size=(n, 2, layers)) * 0.1  # (n, 2, L, E)
    members = block[..., None] * size + np.arange(size)  # (n, 2, L, size)
    inside = rng.dirichlet(np.ones(size), size=(n, 2, layers)) * 0.9  # (n, 2, L, size)
    np.put_along_axis(prior, members, np.take_along_axis(prior, members, -1) + inside, -1)
    return prior.astype(np.float32), np.tile(np.arange(experts) // size, (layers, 1))


@pytest.mark.parametrize("seed", [0, 1, 7, 123])
def test_within_permutations_stay_in_community(seed):
    partition = random_partition(5, 24, seed=seed)
    perms = within_community_permutations(partition, seed)
    check_permutations(perms, 5, 24)  # bijections
    assert np.array_equal(np.take_along_axis(partition, perms, 1), partition)
    assert np.all(perms[:, 0] == 0)  # the singleton stays put
    assert np.any(perms != np.arange(24))  # something moved


def test_global_permutations_cross_communities():
    partition = random_partition(5, 24)
    perms = global_permutations(5, 24, seed=3)
    check_permutations(perms, 5, 24)
    crossed = np.take_along_axis(partition, perms, 1) != partition  # (L, E)
    assert crossed.any(axis=1).all()


def test_permutations_reproducible_per_seed_and_layer():
    partition = random_partition(4, 16)
    within = within_community_permutations
    assert np.array_equal(within(partition, 5), within(partition, 5))
    assert not np.array_equal(within(partition, 5), within(partition, 6))
    assert np.array_equal(global_permutations(4, 16, 5), global_permutations(4, 16, 5))
    assert not np.array_equal(global_permutations(4, 16, 5), global_permutations(4, 16, 6))
    # Layer l's draw does not depend on how many layers are drawn.
    assert np.array_equal(global_permutations(2, 16, 5), global_permutations(4, 16, 5)[:2])
    assert np.array_equal(within(partition[:2], 5), within(partition, 5)[:2])


def test_apply_permutations_matches_reference(tmp_path):
    prior = random_prior(37, 3, 8)
    perms = global_permutations(3, 8, seed=1)
    reference = np.empty_like(prior)
    for layer in range(3):
        reference[:, :, layer, :] = prior[:, :, layer, perms[layer]]
    out = apply_permutations(prior, perms, tmp_path / "one.npy", chunk_rows=1000)
    shuffled = np.load(out)
    assert shuffled.dtype == np.float32
    assert np.array_equal(shuffled, reference)
    assert np.array_equal(permute_experts(prior, perms), reference)
    np.testing.assert_allclose(shuffled.sum(-1), 1.0, atol=1e-5)
    apply_permutations(prior, perms, tmp_path / "chunked.npy", chunk_rows=5)
    assert (tmp_path / "one.npy").read_bytes() == (tmp_path / "chunked.npy").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chunked.npy", "one.npy"]  # no temp files left


def test_apply_permutations_rejects_non_bijection(tmp_path):
    prior = random_prior(4, 2, 4)
    with pytest.raises(ValueError, match="permutation"):
        apply_permutations(prior, np.zeros((2, 4), dtype=np.int64), tmp_path / "x.npy")
    assert not (tmp_path / "x.npy").exists()


def numpy_bias(prior: np.ndarray, beta: float) -> np.ndarray:
    """Independent eq. (3): clamp, renormalise, log, centre over experts (float64)."""
    experts = prior.shape[-1]
    c = np.clip(prior.astype(np.float64), EPS / experts, C / experts)
    log_c = np.log(c / c.sum(-1, keepdims=True))
    return beta * (log_c - log_c.mean(-1, keepdims=True))


def test_prior_side_strength_matches_numpy():
    prior = random_prior(50, 3, 16, seed=2)
    prior[0, 0, 0] = 0.0
    prior[0, 0, 0, 3] = 1.0  # saturates the upper clamp; the other 15 tie at the lower clamp
    shuffled = permute_experts(prior, global_permutations(3, 16, seed=4))
    top_k, beta = 4, 0.7
    got = prior_side_strength(prior, shuffled, top_k, EPS, C, beta=beta, chunk_rows=7)

    def topk(x):
        log_c = np.log(np.clip(x.astype(np.float64), EPS / 16, C / 16))
        return np.argsort(-log_c, -1, kind="stable")[..., :top_k].reshape(-1, top_k)

    pairs = zip(topk(prior), topk(shuffled), strict=True)
    overlap = np.mean([len(set(a) & set(b)) / top_k for a, b in pairs])
    delta = np.abs(numpy_bias(shuffled, beta) - numpy_bias(prior, beta))
    p90 = np.percentile(delta, 90, method="lower")
    width = 2 * beta * np.log(C / EPS) / ABS_DELTA_BINS
    assert got["abs_delta_bias_p90_resolution"] == pytest.approx(width)
    assert got["prior_topk_overlap"] == pytest.approx(overlap)
    assert got["topk_change_rate"] == pytest.approx(1 - overlap)
    assert p90 - width - 1e-6 <= got["abs_delta_bias_p90"] <= p90 + 1e-6
    assert got["abs_delta_bias_mean"] == pytest.approx(delta.mean(), rel=1e-5)
    assert got["clamp_upper_fraction"] == pytest.approx(np.mean(shuffled >= np.float32(C / 16)))
    assert got["clamp_upper_fraction"] > 0
    assert got["entries"] == prior.size


def test_prior_side_strength_identity_is_zero():
    prior = random_prior(20, 2, 8)
    identity = permute_experts(prior, np.tile(np.arange(8), (2, 1)))
    got = prior_side_strength(prior, identity, 2, EPS, C)
    assert got["prior_topk_overlap"] == 1.0
    assert got["topk_change_rate"] == 0.0
    assert got["abs_delta_bias_p90"] == 0.0


def test_within_shuffle_keeps_planted_communities():
    prior, partition = planted_prior(200, 3)
    got = within_shuffle_community_check(prior, partition, (0, 1, 2), (0.15, 0.2), 2, EPS, C)
    assert len(got["within"]["per_combination"]) == 6
    assert got["within"]["min"] >= 0.9
    assert got["within"]["mean"] >= 0.95
    assert got["global"]["mean"] <= 0.6
    assert got["rows_used"] == 200


def test_community_check_subsamples_rows():
    prior, partition = planted_prior(120, 2)
    args = (prior, partition, (0,), (0.2,), 2, EPS, C)
    got = within_shuffle_community_check(*args, max_rows=50, chunk_rows=16)
    assert (got["rows_total"], got["rows_used"]) == (120, 50)
    again = within_shuffle_community_check(*args, max_rows=50, chunk_rows=50)
    assert again["within"] == got["within"]


def test_shuffle_records_checksums_the_trainer_checks(tmp_path):
    prior, partition = planted_prior(30, 2, experts=8, blocks=2)
    paths = {name: tmp_path / name for name in ("prior.npy", "within.npy", "global.npy", "validation.json")}
    np.save(paths["prior.npy"], prior)
    (tmp_path / "partition.json").write_text(json.dumps({"labels": partition.tolist()}))
    argv = [
        "priors", "shuffle", "--prior", str(paths["prior.npy"]),
        "--partition", str(tmp_path / "partition.json"), "--top-k", "2", "--seed", "0",
        "--validation-seeds", "0", "--rhos", "0.2",
        "--within", str(paths["within.npy"]), "--global", str(paths["global.npy"]),
        "--validation", str(paths["validation.json"]),
    ]  # fmt: skip
    assert cli.main(argv) == 0
    record = json.loads(paths["validation.json"].read_text())
    for scope, name in (("source", "prior.npy"), ("within", "within.npy"), ("global", "global.npy")):
        assert record["files"][scope]["sha256"] == file_sha256(paths[name])
    meta = {"prior": {"path": "prior.npy", "sha256": file_sha256(paths["prior.npy"])}}

    assert check_prior_file(meta, paths["within.npy"], "shuffled_within", record) == "shuffled_within"
    assert check_prior_file(meta, paths["global.npy"], None, record) == "shuffled_global"
    with pytest.raises(UserInputError, match="shuffle record names"):  # the other scope's file
        check_prior_file(meta, paths["global.npy"], "shuffled_within", record)
    with pytest.raises(UserInputError, match="modified or replaced after the meta"):
        check_prior_file(meta, paths["within.npy"], "base", record)
    with pytest.raises(UserInputError, match="no shuffle record"):
        check_prior_file(meta, paths["within.npy"], None, None)
    other = {"prior": {"sha256": "0" * 64}}
    with pytest.raises(UserInputError, match="made from a prior"):
        check_prior_file(other, paths["within.npy"], "shuffled_within", record)

    shuffled = np.load(paths["within.npy"])
    shuffled[0, 0, 0] = shuffled[0, 0, 0, ::-1].copy()
    np.save(paths["within.npy"], shuffled)  # edited after the shuffle wrote it
    with pytest.raises(UserInputError, match="modified or replaced after the shuffle") as error:
        check_prior_file(meta, paths["within.npy"], "shuffled_within", record)
    assert str(paths["within.npy"]) in str(error.value)
