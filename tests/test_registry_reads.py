"""The registry and layout.py are the only statement of what they hold.

Every schema key is read by the workflow (a key nothing reads is a setting that changes nothing),
and the code restates neither the registry's benchmark lists nor layout.py's results root and
file names.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from tests.dag import ROOT
from tests.registry_reads import unread_keys
from workflow_scripts import layout, registry

# A tuple, list or set of this many registry benchmark ids is a copy of a registry list.
LIST_LENGTH = 3


@pytest.mark.slow
def test_every_schema_key_is_read():
    assert unread_keys(ROOT) == []


def test_a_key_nothing_reads_is_found(tmp_path):
    """The check itself: a key read under another object's name does not count for this one."""
    schema = {
        "type": "object",
        "properties": {
            "models": {"additionalProperties": {"properties": {"name": {}, "selection": {}}}},
            "datasets": {"additionalProperties": {"properties": {"name": {}}}},
        },
    }
    (tmp_path / "workflow_scripts" / "schemas").mkdir(parents=True)
    (tmp_path / "rules").mkdir()
    (tmp_path / "Snakefile").write_text("")
    (tmp_path / "workflow_scripts" / "schemas" / "config.schema.json").write_text(json.dumps(schema))
    (tmp_path / "workflow_scripts" / "report.py").write_text(
        "def labels(config):\n    return {m: spec['name'] for m, spec in config['models'].items()}\n"
        "SELECTION = 'selection'\n"
    )
    assert unread_keys(tmp_path) == ["models.*.selection", "datasets", "datasets.*.name"]


def _code_files(root: Path) -> list[Path]:
    """The workflow's code, layout.py (which defines the paths) and the schema aside."""
    files = sorted((root / "workflow_scripts").rglob("*.py"))
    return [path for path in files if path.name != "layout.py"]


def _docstrings(tree: ast.Module) -> set[int]:
    nodes = [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.ClassDef))]
    return {
        id(node.body[0].value)
        for node in nodes
        if node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
    }


def literal_benchmark_lists(root: Path, benchmarks: set[str]) -> list[str]:
    """``file:line`` of every tuple, list or set of benchmark ids written out in the code."""
    found = []
    for path in _code_files(root):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Tuple | ast.List | ast.Set) or len(node.elts) < LIST_LENGTH:
                continue
            values = [e.value for e in node.elts if isinstance(e, ast.Constant)]
            if len(values) == len(node.elts) and all(value in benchmarks for value in values):
                found.append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def _layout_names() -> set[str]:
    """The results root and the file names layout.py defines."""
    names = {value for name, value in vars(layout).items() if name.isupper() and isinstance(value, str)}
    names = {value for value in names if "." in value} | set(layout.PRIOR_FILES.values())
    return names | {layout.RESULTS}


def _is_path(text: str, names: set[str]) -> bool:
    return text in names or (text.startswith(f"{layout.RESULTS}/") and " " not in text)


def literal_paths(root: Path) -> list[str]:
    """``file:line: text`` of every results path or layout file name written out in code or rules,
    and every file name a rule types itself."""
    names, found = _layout_names(), []
    for path in _code_files(root):
        tree = ast.parse(path.read_text())
        docstrings = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                if _is_path(node.value, names):
                    found.append(f"{path.relative_to(root)}:{node.lineno}: {node.value}")
    for path in [*sorted((root / "rules").glob("*.smk")), root / "Snakefile"]:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            texts = [text for text in re.findall(r'"([^"]*)"', code) if _is_path(text, names)]
            texts += re.findall(r'\bname="([^"]+)"', code)  # a stage folder's file: layout.py names it
            found += [f"{path.relative_to(root)}:{number}: {text}" for text in texts]
    return found


def test_no_benchmark_list_restated_in_code():
    """Which benchmarks a suite holds, and in what order, comes from the registry (e.g. Overall@9)."""
    benchmarks = set(registry.load_config(registry.shipped_config_files(ROOT, toy=False))["benchmarks"])
    assert literal_benchmark_lists(ROOT, benchmarks) == []


@pytest.mark.slow
def test_no_results_path_or_file_name_restated_outside_layout():
    assert literal_paths(ROOT) == []
