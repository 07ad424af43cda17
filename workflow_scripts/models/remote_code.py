"""The code a downloaded checkpoint runs under ``trust_remote_code``, pinned by the checkpoint's commit.

Every load in the pipeline reads the downloaded folder with ``local_files_only=True``, so the
Python files ``trust_remote_code`` imports (Moonlight's ``tokenization_moonshot.py`` and
``modeling_deepseek.py``, DeepSeek-V2-Lite's ``modeling_deepseek.py``) are those of the
snapshot at the locked commit, never the hub's ``main``. One way around that remains: an
``auto_map`` entry naming another repository (``owner/repo--module.Class``), whose code
transformers takes from that repository at whatever revision it finds. A download refuses it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: The files whose ``auto_map`` tells transformers which remote classes to import.
AUTO_MAP_FILES = ("config.json", "tokenizer_config.json", "processor_config.json", "preprocessor_config.json")


def _class_references(value: Any) -> list[str]:
    """The class references of one ``auto_map`` value: a string, or a list such as ``[slow, fast]``."""
    values = value if isinstance(value, list) else [value]
    return [reference for reference in values if isinstance(reference, str)]


def foreign_code(folder: Path) -> list[str]:
    """``file: Auto class -> reference`` of every ``auto_map`` entry naming code outside ``folder``."""
    found = []
    for name in AUTO_MAP_FILES:
        path = folder / name
        if not path.is_file():
            continue
        auto_map = json.loads(path.read_text()).get("auto_map") or {}
        for auto_class, value in sorted(auto_map.items()):
            found += [f"{name}: {auto_class} -> {ref}" for ref in _class_references(value) if "--" in ref]
    return found


def remote_code(folder: Path) -> dict[str, str]:
    """sha256 of each Python file of the checkpoint (what ``trust_remote_code`` may import), by path."""
    from workflow_scripts.records import file_sha256

    return {str(path.relative_to(folder)): file_sha256(path) for path in sorted(folder.rglob("*.py"))}
