"""Load balancing under tensor + sequence parallelism: Megatron-Core's own router and the product's.

``tests/megatron_load_balancing_tp.py`` runs under ``torchrun`` at one process and at a
tensor-parallel group of 2 with sequence parallelism. With per-token loss, Megatron multiplies
an attached auxiliary loss by ``valid_token_count * TP`` and relies on each rank's count being
its own. Megatron-Core 0.19.2 breaks that for its load-balancing losses once a padding mask is
given: ``moe_utils.get_tokens_per_expert_and_token_count`` all-reduces the local
tokens-per-expert tensor in place (``tensor_parallel.mappings._reduce``) and then sums that same
tensor as the local count, so every rank passes the group's count and the summed gradient is TP
times the one-process gradient. The product's forward step always gives the padding mask, so
``PriorBiasedRouter`` attaches those losses with the rank's own count (docs/training.md).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("megatron.core", reason="runs in the Megatron-Core environment (docs/training.md)")
pytestmark = pytest.mark.megatron

import torch  # noqa: E402

from tests.dag import ROOT  # noqa: E402

PROBE = "tests.megatron_load_balancing_tp"


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[int, dict]:
    """The probe's records at one process and at tensor parallel 2, by world size."""
    root = tmp_path_factory.mktemp("load_balancing_tp")
    torchrun = Path(sys.executable).with_name("torchrun")
    found = {}
    for world in (1, 2):
        out = root / f"world{world}.pt"
        done = subprocess.run(
            [str(torchrun), "--standalone", f"--nproc-per-node={world}", "-m", PROBE, str(out)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-6000:]
        found[world] = torch.load(out)
    return found


def relative(ours: torch.Tensor, reference: torch.Tensor) -> float:
    assert float(reference.abs().max()) > 0
    return float((ours - reference).abs().max() / reference.abs().max())


def test_megatron_own_router_weighs_load_balancing_right_without_a_padding_mask(runs):
    one, two = runs[1]["megatron_unmasked"], runs[2]["megatron_unmasked"]
    assert one["counts"] == [[16.0]] and two["counts"] == [[8.0], [8.0]]  # each rank its own tokens
    assert relative(two["grad"], one["grad"]) <= 1e-5


def test_megatron_own_router_doubles_load_balancing_under_a_padding_mask(runs):
    """The same tokens with a mask that pads none: each rank passes the group's 16 tokens, not its 8.

    Upstream behaviour, not the product's: should a later Megatron-Core count right, this fails,
    and docs/training.md's account of the correction is to be revised (the correction stays right).
    """
    one, two = runs[1]["megatron_masked"], runs[2]["megatron_masked"]
    assert one["counts"] == [[16.0]] and two["counts"] == [[16.0], [16.0]]
    assert relative(one["grad"], runs[1]["megatron_unmasked"]["grad"]) <= 1e-6  # one process: no change
    assert relative(two["grad"], 2 * one["grad"]) <= 1e-5


@pytest.mark.parametrize("balancing", ["aux_loss", "seq_aux_loss"])
def test_product_router_weighs_load_balancing_at_tensor_parallel_2_as_on_one_process(runs, balancing):
    """Padding falls on one rank only (8 and 5 real tokens), with ``aux_loss_correction`` applied."""
    name = f"project_{balancing}"
    assert relative(runs[2][name]["grad"], runs[1][name]["grad"]) <= 1e-5
