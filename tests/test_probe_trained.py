"""Bias-free probes of a TRAINED RPB checkpoint (issue 4, Appendix F.8).

A short RPB run is trained in-process on the ``training_inputs`` base, split and prior; the model
right after training is probed with the training-time routing hook attached exactly as the
trainer attaches it (``RoutingContext`` of the objective, the sample's prior rows through
``set_prior`` with the prior's clip settings) and after detaching it, and the checkpoint saved as
``train run`` saves it is reloaded fresh and probed: the attached routes differ, the detached
routes equal the reload's.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pd = pytest.importorskip("pandas")

from workflow_scripts.file_formats.prior import load_prior  # noqa: E402
from workflow_scripts.file_formats.routes import ProbeTokens  # noqa: E402
from workflow_scripts.modeling.batches import encode_rows  # noqa: E402
from workflow_scripts.modeling.loop import train  # noqa: E402
from workflow_scripts.modeling.objective import Objective  # noqa: E402
from workflow_scripts.modeling.toy import load_local, save_toy_base  # noqa: E402
from workflow_scripts.probe.routes import probe_tokens, record_routes  # noqa: E402
from workflow_scripts.routing.hf import RoutingContext, attach, find_gates  # noqa: E402
from workflow_scripts.train.cli import train_config  # noqa: E402

SEQUENCE_LENGTH = 64
TRAINING = {
    "backend": "hf",
    "epochs": 1,  # 24 rows / 12 = 2 optimizer steps
    "global_batch_size": 12,
    "micro_batch_size": 12,
    "sequence_length": SEQUENCE_LENGTH,
    "packing": False,
    "loss_on": "answer",
    "precision": "fp32",
    "optimizer": {"name": "adam", "beta1": 0.9, "beta2": 0.95, "weight_decay": 0.1, "grad_clip": 1.0},
    "schedule": {"name": "cosine", "lr_max": 1e-2, "lr_min": 1e-3, "warmup_steps": 1},
    "checkpoint_every_steps": 100,
}
CONDITION = {"intervention": "rpb", "params": {"beta": 1.0}, "prior": "base"}


def _hooked_topk(
    model, tokenizer, tokens: ProbeTokens, objective: Objective, prior: np.ndarray
) -> np.ndarray:
    """(L, N, k) top-k of the probed tokens with the RPB hook attached as the trainer attaches it."""
    context = RoutingContext(
        mode=objective.routing_mode or "soft",
        beta=objective.beta,
        bias_in_gate_weights=objective.bias_in_gate_weights,
    )
    starts = np.flatnonzero(np.diff(tokens.row_ids, prepend=-1))
    ends = [*starts[1:], len(tokens)]
    chosen = []
    with attach(model, context), torch.inference_mode():
        with pytest.raises(RuntimeError, match="already have a forward override"):
            record_routes(model, tokenizer, tokens)  # a probe never runs on top of a training hook
        model.eval()
        for ids, start, end in zip(tokens.inputs, starts, ends, strict=True):
            row = int(tokens.row_ids[start])  # pool row_id == split row == prior row
            positions = torch.from_numpy(tokens.positions[start:end].astype(np.int64))
            span_ids = torch.full((1, ids.size), -1, dtype=torch.long)
            span_ids[0, positions] = torch.from_numpy(tokens.spans[start:end].astype(np.int64))
            rows = torch.from_numpy(np.asarray(prior[[row]], dtype=np.float32))  # (1, 2, L, E)
            context.set_prior(rows, span_ids, objective.clip_eps, objective.clip_c)
            model(input_ids=torch.from_numpy(ids)[None], use_cache=False)
            layers = context.recorder.layer_indices()
            chosen.append(torch.stack([index[positions] for index in layers]).sort(dim=-1).values)
    return torch.cat(chosen, dim=1).numpy().astype(np.int16)


@pytest.mark.slow
def test_trained_rpb_checkpoint_is_probed_bias_free(training_inputs, tmp_path):
    meta = json.loads(training_inputs["meta"].read_text())
    objective = Objective.from_condition(CONDITION, float(meta["clip_eps"]), float(meta["clip_c"]))
    assert objective.routing_mode == "soft" and objective.beta == 1.0
    model, tokenizer = load_local(training_inputs["base"])
    split = pd.read_parquet(training_inputs["split"])
    prompts, answers = split["prompt"].tolist(), split["answer"].tolist()
    examples = encode_rows(tokenizer, prompts, answers, SEQUENCE_LENGTH)
    prior = load_prior(training_inputs["prior"])
    records = train(model, examples, objective, train_config(TRAINING), 3, tokenizer.pad_token_id, prior)
    assert len(records) == 2
    assert all("forward" not in vars(gate) for _, gate in find_gates(model))  # the trainer detached

    pool = list(zip(split["row_id"].tolist(), prompts, answers, strict=True))
    tokens = probe_tokens(tokenizer, pool, SEQUENCE_LENGTH, 10**6)  # every Q/A token of every row
    base_model, _ = load_local(training_inputs["base"])
    base = record_routes(base_model, tokenizer, tokens)
    hooked = _hooked_topk(model, tokenizer, tokens, objective, prior)
    detached = record_routes(model, tokenizer, tokens)  # the hook is gone again
    save_toy_base(model, tokenizer, tmp_path / "trained")  # what ``train run`` saves
    fresh, _ = load_local(tmp_path / "trained")
    reloaded = record_routes(fresh, tokenizer, tokens)

    assert not np.array_equal(base.probs, reloaded.probs)  # training moved the routers
    changed = (hooked != detached.topk).any(axis=-1)  # (L, N) tokens whose top-k set the hook moved
    assert changed.any(), "the RPB hook must change the routes of the trained checkpoint"
    np.testing.assert_array_equal(detached.topk, reloaded.topk)
    np.testing.assert_array_equal(detached.probs, reloaded.probs)
