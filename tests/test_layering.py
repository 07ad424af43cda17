"""The packages of ``workflow_scripts`` import one way: down the layers below, never in a cycle.

A unit is a subpackage or a top-level module of ``workflow_scripts``. Every import counts,
module-level and function-local alike, because a lazy import ties the packages together just
as much; only imports spelled as code are seen (``importlib`` strings are not).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import networkx as nx

from tests.dag import ROOT

PACKAGE = ROOT / "workflow_scripts"

# Bottom first. A unit may import only from units in lower layers; a new unit must be placed here.
LAYERS = (
    ("errors", "atomic", "registry", "commands", "task_formats"),
    ("layout", "routing", "routing_metrics", "modeling"),
    ("provenance",),
    ("data",),
    ("priors",),
    ("train",),
    ("models",),  # a toy base is pretrained with the training loop
    ("probe",),
    ("evaluate",),
    ("report",),
    ("compute_plan", "forkserver"),
    ("cli", "plan_cli", "envs_cli"),
    ("__main__",),
)
RANK = {unit: rank for rank, layer in enumerate(LAYERS) for unit in layer}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(node: ast.AST, module: str, is_package: bool) -> list[str]:
    """Absolute ``workflow_scripts`` module names one import statement names."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:
        parts = module.split(".")
        base = parts[: len(parts) - node.level + (1 if is_package else 0)]
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        source = node.module
    return [f"{source}.{alias.name}" for alias in node.names] if source == "workflow_scripts" else [source]


def _unit(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "workflow_scripts" else None


def import_edges() -> dict[tuple[str, str], list[str]]:
    """(importer unit, imported unit) -> the ``file:line`` of each import between two units."""
    edges = defaultdict(list)
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        source = _unit(module)
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            for name in _imported(node, module, path.name == "__init__.py"):
                target = _unit(name)
                if source and target and target != source:
                    edges[source, target].append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return edges


def test_no_import_cycle_between_units():
    edges = import_edges()
    cycles = sorted(nx.simple_cycles(nx.DiGraph(list(edges))))
    described = [
        " -> ".join([*cycle, cycle[0]])
        + " ("
        + "; ".join(edges[a, b][0] for a, b in zip(cycle, [*cycle[1:], cycle[0]], strict=True))
        + ")"
        for cycle in cycles
    ]
    assert not cycles, "import cycles between packages:\n" + "\n".join(described)


def test_every_unit_has_a_layer():
    units = {_unit(_module_name(path)) for path in PACKAGE.rglob("*.py")} - {None}
    assert not units - set(RANK), f"place these in LAYERS: {sorted(units - set(RANK))}"


def test_imports_only_go_down():
    upward = [
        f"{source} (layer {RANK[source]}) imports {target} (layer {RANK[target]}) at {where[0]}"
        for (source, target), where in sorted(import_edges().items())
        if source in RANK and target in RANK and RANK[target] >= RANK[source]
    ]
    assert not upward, "imports that do not go down the layers:\n" + "\n".join(upward)


def test_the_graph_sees_lazy_imports():
    edges = import_edges()
    assert ("cli", "provenance") in edges  # imported inside main()
    assert ("__main__", "cli") in edges
