"""The local pipeline's side of the Megatron-Bridge conversion tests, on the local transformers.

The pipeline writes toy bases and reads exported checkpoints with the local environment's
transformers (5.24), while Megatron-Bridge converts them with the 5.12.1 it requires; the
conversion tests therefore run this module in a subprocess with that transformers first on
``PYTHONPATH`` (tests/run_megatron_cpu.sh installs it).

``base ARCH OUT``: a toy base of architecture ``ARCH`` with its paper family's chat template
and special tokens (``tests.chat_families``); Moonlight's tokenizer is remote code, as on the hub.
``inspect CHECKPOINT IDS.npy OUT_DIR``: what the probes and evaluations read of an HF checkpoint:
float32 logits ``(B, S, V)`` (``logits.npy``), the tokenizer's rendering of a fixed chat
(``chat.txt``, loaded with ``trust_remote_code`` as the evaluation loads it) and the model's
class and state-dict keys (``model.json``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

#: The paper family (``tests.chat_families``) whose chat template and special tokens each toy carries.
FAMILY = {"deepseek_v3": "moonlight", "deepseek_v2": "deepseek_v2_lite", "qwen3_moe": "qwen3_30b_a3b"}

#: Moonlight's tokenizer is remote code with its own vocabulary file (``tokenization_moonshot.py``,
#: ``tiktoken.model``; no ``tokenizer.json``), so loading it needs ``trust_remote_code``. The
#: stand-in: a fast tokenizer under its own class, reading its vocabulary from its own file.
REMOTE_TOKENIZER = "tokenization_moonshot.py"
REMOTE_VOCABULARY = "moonshot_vocab.json"
REMOTE_TOKENIZER_CODE = f'''"""Stand-in for Moonlight's remote-code tokenizer."""
import os
import shutil

from transformers import PreTrainedTokenizerFast


class TikTokenTokenizer(PreTrainedTokenizerFast):
    vocab_files_names = {{"vocab_file": "{REMOTE_VOCABULARY}"}}

    def __init__(self, vocab_file=None, **kwargs):
        kwargs.pop("tokenizer_file", None)
        super().__init__(tokenizer_file=vocab_file, **kwargs)
        self.vocab_file = vocab_file

    def save_vocabulary(self, save_directory, filename_prefix=None):
        target = os.path.join(save_directory, "{REMOTE_VOCABULARY}")
        if os.path.abspath(self.vocab_file) != os.path.abspath(target):
            shutil.copyfile(self.vocab_file, target)
        return (target,)
'''

CHAT = [{"role": "user", "content": "What is 2 + 3?"}, {"role": "assistant", "content": "2 + 3 = 5."}]


def write_base(arch: str, out: Path) -> None:
    """A toy base of ``arch`` with its family's tokens and chat template, saved like the pipeline's."""
    from tests.chat_families import FAMILIES, family_tokenizer
    from tests.dag import registry_toy_spec, toy_rows
    from workflow_scripts.modeling.toy import build_toy_model, save_toy_base

    prompts, answers = toy_rows()
    tokenizer = family_tokenizer(FAMILIES[FAMILY[arch]], prompts + answers)
    save_toy_base(build_toy_model(arch, registry_toy_spec(arch), tokenizer, seed=0), tokenizer, out)
    if arch == "deepseek_v3":
        (out / REMOTE_TOKENIZER).write_text(REMOTE_TOKENIZER_CODE)
        (out / "tokenizer.json").rename(out / REMOTE_VOCABULARY)
        config_path = out / "tokenizer_config.json"
        config = json.loads(config_path.read_text())
        config["tokenizer_class"] = "TikTokenTokenizer"
        config["auto_map"] = {"AutoTokenizer": ["tokenization_moonshot.TikTokenTokenizer", None]}
        config_path.write_text(json.dumps(config, indent=2))


def inspect(checkpoint: Path, input_ids: np.ndarray, out: Path) -> None:
    """Write logits, chat rendering and state-dict keys of ``checkpoint`` into ``out``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(checkpoint, local_files_only=True, dtype=torch.float32)
    model.eval()
    with torch.no_grad():
        np.save(out / "logits.npy", model(torch.from_numpy(input_ids)).logits.numpy())  # (B, S, V)
    try:
        tokenizer = AutoTokenizer.from_pretrained(checkpoint, local_files_only=True, trust_remote_code=True)
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
