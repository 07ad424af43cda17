"""The local pipeline's side of the Megatron-Bridge conversion tests, on the local transformers.

The pipeline writes toy bases and reads exported checkpoints with the local environment's
transformers (5.24), while Megatron-Bridge converts them with the 5.12.1 it requires; the
conversion tests therefore run this module in a subprocess with that transformers first on
``PYTHONPATH`` (tests/run_megatron_cpu.sh installs it).

``base ARCH OUT``: a toy base of architecture ``ARCH`` with its paper family's chat template
and special tokens (``tests.chat_families``); Moonlight's tokenizer is the toy pipeline's, remote
code with a Python backend, as on the hub.
``inspect CHECKPOINT IDS.npy OUT_DIR``: what the probes and evaluations read of an HF checkpoint:
float32 logits ``(B, S, V)`` (``logits.npy``), the tokenizer's rendering of a fixed chat
(``chat.txt``, loaded with ``trust_remote_code`` as the evaluation loads it) and the model's
class and state-dict keys (``model.json``).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import numpy as np

#: The paper family (``tests.chat_families``) whose chat template and special tokens each toy carries.
FAMILY = {"deepseek_v3": "moonlight", "deepseek_v2": "deepseek_v2_lite", "qwen3_moe": "qwen3_30b_a3b"}

CHAT = [{"role": "user", "content": "What is 2 + 3?"}, {"role": "assistant", "content": "2 + 3 = 5."}]


def write_base(arch: str, out: Path) -> None:
    """A toy base of ``arch`` with its family's tokens and chat template, saved like the pipeline's.

    The toy Moonlight's tokenizer is the pipeline's (``modeling.moonlight``): remote code with a
    Python backend, two ids longer than the model's embedding, as the hub's Moonlight.
    """
    from tests.chat_families import FAMILIES, family_tokenizer, moonlight_remote_tokenizer
    from tests.dag import registry_toy_spec, toy_rows
    from workflow_scripts.modeling.moonlight import model_vocab_size
    from workflow_scripts.modeling.toy import build_toy_model, save_toy_base

    prompts, answers = toy_rows()
    with tempfile.TemporaryDirectory() as folder:
        if arch == "deepseek_v3":
            tokenizer = moonlight_remote_tokenizer(prompts + answers, Path(folder))
            rows = model_vocab_size(tokenizer)
        else:
            tokenizer = family_tokenizer(FAMILIES[FAMILY[arch]], prompts + answers)
            rows = len(tokenizer)
        model = build_toy_model(arch, registry_toy_spec(arch), tokenizer, seed=0, vocab_size=rows)
        save_toy_base(model, tokenizer, out)


def inspect(checkpoint: Path, input_ids: np.ndarray, out: Path) -> None:
    """Write logits, chat rendering and state-dict keys of ``checkpoint`` into ``out``."""
    import torch
    from transformers import AutoModelForCausalLM

    from workflow_scripts.modeling.tokenizer import load_tokenizer

    model = AutoModelForCausalLM.from_pretrained(checkpoint, local_files_only=True, dtype=torch.float32)
    model.eval()
    with torch.no_grad():
        np.save(out / "logits.npy", model(torch.from_numpy(input_ids)).logits.numpy())  # (B, S, V)
    try:
        tokenizer = load_tokenizer(checkpoint)
        rendered = tokenizer.apply_chat_template(CHAT, tokenize=False)
    except OSError as error:  # the test compares renderings: a checkpoint whose tokenizer fails says why
        rendered = f"tokenizer does not load: {error}"
    (out / "chat.txt").write_text(rendered)
    keys = sorted(model.state_dict())
    (out / "model.json").write_text(json.dumps({"class": type(model).__name__, "keys": keys}))


def main(argv: list[str]) -> int:
    command, *rest = argv
    if command == "base":
        write_base(rest[0], Path(rest[1]))
    else:
        out = Path(rest[2])
        out.mkdir(parents=True, exist_ok=True)
        inspect(Path(rest[0]), np.load(rest[1]), out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
