"""The packages of ``workflow_scripts`` import one way: a stage uses the layers below it, never another stage.

A unit is a subpackage or a top-level module of ``workflow_scripts``. Every import counts,
module-level and function-local alike, because a lazy import ties the packages together just
as much; only imports spelled as code are seen (``importlib`` strings are not).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import networkx as nx
import pytest

from tests.dag import ROOT

PACKAGE = ROOT / "workflow_scripts"

# Bottom first; a unit imports only from layers below its own, so no stage imports another
# stage. A piece two stages share moves below the stages; a new unit must be placed here.
FOUNDATIONS = (
    ("errors",),
    ("atomic", "registry", "task_formats", "families"),
    ("commands",),
    ("layout", "records", "routing", "routing_metrics", "toy_tasks", "score_aggregates"),
    ("modeling", "chat_sources", "file_formats", "hub"),
)
STAGES = ("data", "models", "priors", "train", "probe", "evaluate", "report", "provenance")
WORKFLOW = (
    ("plan_costs", "makespan", "forkserver", "dag_inputs", "run_status", "bundle"),
    ("compute_plan",),
    ("slurm_profile",),
    ("cli", "plan_cli", "envs_cli", "preflight", "lock_cli", "status_cli"),
    ("__main__",),
)
LAYERS = (*FOUNDATIONS, STAGES, *WORKFLOW)
RANK = {unit: rank for rank, layer in enumerate(LAYERS) for unit in layer}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _imported(node: ast.AST, module: str, is_package: bool) -> list[str]:
    """The ``workflow_scripts`` modules one import statement names (a package for a name in it)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom):
        if node.level:
            parts = module.split(".")
            base = parts[: len(parts) - node.level + (1 if is_package else 0)]
            source = ".".join(base + ([node.module] if node.module else []))
        else:
            source = node.module
        names = [f"{source}.{alias.name}" for alias in node.names]
    else:
        return []
    found = []
    for name in names:
        while name and name not in MODULES:
            name = name.rpartition(".")[0]
        if name and name != "workflow_scripts":
            found.append(name)
    return found


def _unit(module: str) -> str:
    return module.split(".")[1]


def module_edges() -> dict[tuple[str, str], list[str]]:
    """(importer module, imported module) -> the ``file:line`` of each import between them."""
    edges = defaultdict(list)
    for module, path in MODULES.items():
        if module == "workflow_scripts":
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            for name in _imported(node, module, path.name == "__init__.py"):
                if name != module:
                    edges[module, name].append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return edges


def import_edges() -> dict[tuple[str, str], list[str]]:
    """(importer unit, imported unit) -> the ``file:line`` of each import between two units."""
    edges = defaultdict(list)
    for (source, target), where in module_edges().items():
        if _unit(source) != _unit(target):
            edges[_unit(source), _unit(target)].extend(where)
    return edges


def test_every_unit_has_a_layer():
    units = {_unit(module) for module in MODULES if module != "workflow_scripts"}
    assert not units - set(RANK), f"place these in LAYERS: {sorted(units - set(RANK))}"
    assert len(RANK) == sum(map(len, LAYERS)), "a unit is placed twice"


def test_no_stage_imports_another_stage():
    sideways = [
        f"{source} imports {target} at {', '.join(sorted(set(where)))}"
        for (source, target), where in sorted(import_edges().items())
        if source in STAGES and target in STAGES
    ]
    assert not sideways, "stages that import another stage (move the shared piece below):\n" + "\n".join(
        sideways
    )


def test_lower_layers_never_import_upward():
    upward = [
        f"{source} (layer {RANK[source]}) imports {target} (layer {RANK[target]}) at {where[0]}"
        for (source, target), where in sorted(import_edges().items())
        if RANK[target] >= RANK[source] and not (source in STAGES and target in STAGES)
    ]
    assert not upward, "imports that do not go down the layers:\n" + "\n".join(upward)


@pytest.mark.slow
def test_no_import_cycle_between_modules():
    edges = module_edges()
    cycles = sorted(nx.simple_cycles(nx.DiGraph(list(edges))))
    described = [
        " -> ".join([*cycle, cycle[0]])
        + " ("
        + "; ".join(edges[a, b][0] for a, b in zip(cycle, [*cycle[1:], cycle[0]], strict=True))
        + ")"
        for cycle in cycles
    ]
    assert not cycles, "import cycles between modules:\n" + "\n".join(described)


@pytest.mark.slow
def test_the_graph_sees_lazy_and_submodule_imports():
    edges = module_edges()
    assert ("workflow_scripts.cli", "workflow_scripts.records.verify") in edges  # inside a function
    assert ("workflow_scripts.__main__", "workflow_scripts.cli") in edges
    # ``from package import module`` is an edge to that module, not to the package
    assert ("workflow_scripts.train.cli", "workflow_scripts.train.megatron.entry") in edges


# Inside report/figures: the shared module first, then one module per figure, then the package's
# FIGURES registry, which imports them all; a figure module never imports another figure's.
FIGURE_PACKAGE = "workflow_scripts.report.figures"
FIGURE_ORDER = (
    (f"{FIGURE_PACKAGE}.common",),
    tuple(
        f"{FIGURE_PACKAGE}.{name}"
        for name in (
            "figure1",
            "figure2",
            "figure3",
            "beta_sweep",
            "rho_sensitivity",
            "coactivation_heatmaps",
        )
    ),
    (FIGURE_PACKAGE,),
)


@pytest.mark.slow
def test_each_figure_has_a_module_that_imports_only_the_shared_one():
    placed = {module: rank for rank, layer in enumerate(FIGURE_ORDER) for module in layer}
    present = {
        module for module in MODULES if module == FIGURE_PACKAGE or module.startswith(f"{FIGURE_PACKAGE}.")
    }
    assert present == set(placed), f"place these in FIGURE_ORDER: {sorted(present ^ set(placed))}"
    wrong = [
        f"{source} imports {target} at {where[0]}"
        for (source, target), where in sorted(module_edges().items())
        if source in placed and target in placed and placed[target] >= placed[source]
    ]
    assert not wrong, "figure modules that import sideways or upward:\n" + "\n".join(wrong)
