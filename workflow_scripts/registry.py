"""The experiment registry: typed view of the validated config and table closures.

:func:`load_config` is the one way the registry is loaded (the workflow, the commands
that read it whole, the tests): ``config.yaml`` and its overlays are read (a YAML error
named by file and line, duplicate keys refused), merged, then checked against the JSON
schema (shape, types, unknown keys); :func:`check_references` then checks what a schema cannot express
(a table naming an unknown condition, a corpus naming an unknown dataset, an
intervention missing its parameter), always naming the offending key.
:func:`closure` expands a table or figure into every unit of work it needs,
with derived dependencies (the base probe behind every NMI, the base prior and
partition behind a shuffled prior), so the Snakefile can ask for exactly one
table's inputs.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workflow_scripts.errors import UserInputError

#: The interventions that are not router terms, and the parameters each needs; every router term
#: (config ``router_terms``) is an intervention too, of one parameter, its ``coefficient``.
BUILT_IN_INTERVENTIONS: dict[str, tuple[str, ...]] = {
    "none": (),
    "rpb": ("beta",),
    "rpb_hard": (),
    "router_l2": ("lambda",),
}
#: Built-in interventions that read a prior (a router term reads one where it declares ``prior``).
PRIOR_ROUTING = frozenset({"rpb", "rpb_hard"})
#: How a router term's per-layer values combine over the MoE layers.
LAYER_REDUCTIONS = ("sum", "mean")


@dataclass(frozen=True)
class RouterTerm:
    """One auxiliary router loss of the registry (``router_terms``), the same on both backends.

    Per MoE layer, ``routing.core.ROUTER_TERM_LOSSES[name]`` computes it from that layer's
    ``routing.core.RouterLayer``; ``layers`` says how the layers' values combine (``sum``, as
    Megatron-Core adds its own router losses, or ``mean``); with ``prior`` the term reads the
    frozen-base prior row of each token's span and is a mean over span tokens, without it a mean
    over routed (non-padding) tokens. A condition adds ``coefficient`` times the term.
    """

    name: str
    prior: bool
    layers: str

    @classmethod
    def from_config(cls, name: str, entry: Mapping[str, Any]) -> RouterTerm:
        """``router_terms.<name>`` of the config (or of a job's ``--condition``), checked."""
        term = cls(name, bool(entry.get("prior", False)), entry["layers"])
        if term.layers not in LAYER_REDUCTIONS:
            raise RegistryError(
                f"router_terms.{name}.layers: {term.layers!r} is not one of {LAYER_REDUCTIONS}"
            )
        return term

    def declaration(self) -> dict[str, Any]:
        """The config entry this term was read from (``from_config``'s inverse)."""
        return {"prior": self.prior, "layers": self.layers}


#: The router terms Megatron-Core computes itself (``routing.megatron.MEGATRON_NATIVE_TERMS``), as it
#: computes them: declared otherwise, the local backend would train another loss than Megatron.
MEGATRON_COMPUTED_TERMS = {
    "load_balancing": RouterTerm("load_balancing", prior=False, layers="sum"),
    "z_loss": RouterTerm("z_loss", prior=False, layers="sum"),
}


def router_terms(config: Mapping[str, Any]) -> dict[str, RouterTerm]:
    """The registry's router terms by name."""
    return {name: RouterTerm.from_config(name, entry) for name, entry in config["router_terms"].items()}


#: The keys of a condition a training job reads (``modeling.objective.Objective.from_condition``).
CONDITION_KEYS = ("intervention", "params", "settings", "prior")


def job_condition(config: Mapping[str, Any], name: str) -> dict[str, Any]:
    """What a training job reads of condition ``name``: its ``CONDITION_KEYS`` and, where its
    intervention is a router term, that term's declaration as ``term``.

    The declaration travels with the job, so a job reruns when its term's definition changes.
    """
    condition = config["conditions"][name]
    read = {key: copy.deepcopy(condition[key]) for key in CONDITION_KEYS if key in condition}
    if condition["intervention"] in config["router_terms"]:
        read["term"] = router_terms(config)[condition["intervention"]].declaration()
    return read


def intervention_params(config: Mapping[str, Any]) -> dict[str, tuple[str, ...]]:
    """Every intervention a condition may name, with the parameters it needs."""
    return {**BUILT_IN_INTERVENTIONS, **{name: ("coefficient",) for name in config["router_terms"]}}


def reads_prior(config: Mapping[str, Any], intervention: str) -> bool:
    """Whether a condition of ``intervention`` reads a prior tensor."""
    if intervention in config["router_terms"]:
        return router_terms(config)[intervention].prior
    return intervention in PRIOR_ROUTING


# The registry files of a checkout (relative to its root) and the schema they are validated against.
CONFIG_FILE = "config.yaml"
TOY_OVERLAY = "profiles/local/toy.yaml"
CLAIMS_OVERLAY = "profiles/claims/claims.yaml"  # over the toy overlay: the claims at three seeds
REHEARSAL_OVERLAY = "profiles/rehearsal/rehearsal.yaml"  # over config.yaml: the cluster's first run
#: The config section of the rehearsal's default target (present only under REHEARSAL_OVERLAY).
REHEARSAL = "rehearsal"
SCHEMA = Path(__file__).parent / "schemas" / "config.schema.json"
BASE = "base"
#: A user's own checkpoint (config key ``own_checkpoints``) runs as ``own/{name}``: evaluated once
#: like the base, probed on its corpus like a trained run, and tabled in ``OWN_TABLE``.
OWN = "own"
OWN_TABLE = "own_checkpoints"
#: The paper's per-benchmark tables whose published rows the own-checkpoint table sets beside.
PAPER_ROW_TABLES = ("table16", "table17", "table18", "table19")


class RegistryError(UserInputError, ValueError):
    """A config entry that is well-formed but inconsistent; the message names the key.

    A user error: a command that loads the registry reports it in one line (``cli.main``).
    """


@dataclass(frozen=True)
class Training:
    model: str
    corpus: str
    condition: str
    seed: int


@dataclass(frozen=True)
class Evaluation:
    """An evaluated checkpoint; ``condition == "base"`` (corpus and seed None) is the base model,
    ``own/{name}`` (seed None) an own checkpoint, whose corpus sets its ID/OOD split."""

    model: str
    corpus: str | None
    condition: str
    seed: int | None


@dataclass(frozen=True)
class Probe:
    """A bias-free probe on a corpus' probe pool; ``condition == "base"`` (seed None) probes the base,
    ``own/{name}`` (seed None) an own checkpoint."""

    model: str
    corpus: str
    condition: str
    seed: int | None


@dataclass(frozen=True)
class Prior:
    """A prior tensor: ``kind`` is base, shuffled_within or shuffled_global."""

    model: str
    corpus: str
    kind: str


@dataclass(frozen=True)
class Closure:
    """Everything one table or figure needs, dependencies included."""

    corpora: frozenset[str]
    priors: frozenset[Prior]
    prior_validations: frozenset[tuple[str, str]]
    trainings: frozenset[Training]
    probes: frozenset[Probe]
    evaluations: frozenset[Evaluation]

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, sorted view (for manifests and tests)."""

        def rows(items: Iterable[Any]) -> list[dict[str, Any]]:
            dicts = [item.__dict__ for item in items]
            return sorted(dicts, key=lambda d: tuple(str(v) for v in d.values()))

        return {
            "corpora": sorted(self.corpora),
            "priors": rows(self.priors),
            "prior_validations": [list(pair) for pair in sorted(self.prior_validations)],
            "trainings": rows(self.trainings),
            "probes": rows(self.probes),
            "evaluations": rows(self.evaluations),
        }


def _known(kind: str, value: str, known: Mapping[str, Any], where: str) -> None:
    if value not in known:
        raise RegistryError(f"{where}: unknown {kind} {value!r} (known: {', '.join(sorted(known))})")


def _check_conditions(config: Mapping[str, Any]) -> None:
    for name in config["router_terms"]:
        if name in BUILT_IN_INTERVENTIONS:
            raise RegistryError(f"router_terms.{name}: the name of a built-in intervention")
    for name, term in router_terms(config).items():
        computed = MEGATRON_COMPUTED_TERMS.get(name)
        if computed is not None and term != computed:
            raise RegistryError(
                f"router_terms.{name}: {term.declaration()} would train the local backend on another loss "
                f"than the Megatron backend, where Megatron-Core computes {name} itself as "
                f"{computed.declaration()}"
            )
    known = intervention_params(config)
    for name, condition in config["conditions"].items():
        where = f"conditions.{name}"
        intervention = condition["intervention"]
        _known("intervention", intervention, known, f"{where}.intervention")
        params = condition.get("params", {})
        needed = known[intervention]
        for key in needed:
            if key not in params:
                raise RegistryError(f"{where}.params: intervention {intervention!r} needs {key!r}")
        for key in params:
            if key not in needed:
                raise RegistryError(f"{where}.params.{key}: not a parameter of intervention {intervention!r}")
        has_prior = "prior" in condition
        if reads_prior(config, intervention) and not has_prior:
            raise RegistryError(f"{where}: intervention {intervention!r} needs a 'prior'")
        if not reads_prior(config, intervention) and has_prior:
            raise RegistryError(f"{where}.prior: intervention {intervention!r} reads no prior")


def _check_sources(config: Mapping[str, Any]) -> None:
    toy = config["scale"] == "toy"
    for name, corpus in config["corpora"].items():
        where = f"corpora.{name}"
        _known("dataset", corpus["dataset"], config["datasets"], f"{where}.dataset")
        subsets = config["datasets"][corpus["dataset"]]["subsets"]
        if corpus["subset"] not in subsets:
            raise RegistryError(f"{where}.subset: {corpus['subset']!r} is not among {subsets}")
    for name, dataset in config["datasets"].items():
        if not toy:
            continue
        if "toy" not in dataset:
            raise RegistryError(f"datasets.{name}: scale is toy but there is no 'toy' section")
        missing = [s for s in dataset["subsets"] if s not in dataset["toy"]["rows"]]
        if missing:
            raise RegistryError(f"datasets.{name}.toy.rows: no row count for subsets {missing}")
    if toy:
        if "toy_base" not in config:
            raise RegistryError("toy_base: scale is toy but there is no 'toy_base' section")
        for name, model in config["models"].items():
            if "toy" not in model:
                raise RegistryError(f"models.{name}: scale is toy but there is no 'toy' section")
    for field in ("prompt", "answer"):
        band = config["scoring"]["length"][field]
        if not band["min_chars"] <= band["center_chars"] <= band["max_chars"]:
            raise RegistryError(f"scoring.length.{field}: need min_chars <= center_chars <= max_chars")


def _check_cells(config: Mapping[str, Any], section: str) -> None:
    for name, entry in config[section].items():
        for condition in entry.get("lists_conditions", []):
            _known("condition", condition, config["conditions"], f"{section}.{name}.lists_conditions")
        _check_cell_list(config, entry["cells"], f"{section}.{name}")


def _check_rehearsal(config: Mapping[str, Any]) -> None:
    """The rehearsal's outputs exist, and its cells and preempted conditions name what the registry has."""
    for condition in config["training"].get("preempt", {}).get("conditions", []):
        _known("condition", condition, config["conditions"], "training.preempt.conditions")
    if REHEARSAL not in config:
        return
    for output_id in config[REHEARSAL]["outputs"]:
        _known("table or figure", output_id, outputs(config), f"{REHEARSAL}.outputs")
    _check_cell_list(config, config[REHEARSAL]["cells"], REHEARSAL)


def _check_cell_list(config: Mapping[str, Any], cells: Iterable[Mapping[str, Any]], owner: str) -> None:
    for index, cell in enumerate(cells):
        where = f"{owner}.cells[{index}]"
        for model in cell["models"]:
            _known("model", model, config["models"], f"{where}.models")
        for corpus in cell["corpora"]:
            _known("corpus", corpus, config["corpora"], f"{where}.corpora")
        conditions = cell.get("conditions", [])
        for condition in conditions:
            _known("condition", condition, config["conditions"], f"{where}.conditions")
        seeds = cell.get("eval_seeds", []) + cell.get("probe_seeds", [])
        if conditions and not seeds:
            raise RegistryError(f"{where}: conditions given but neither eval_seeds nor probe_seeds")
        if seeds and not conditions:
            raise RegistryError(f"{where}: seeds given but no conditions")
        flags = ("base_eval", "base_probe", "prior", "shuffled_prior")
        if not conditions and not any(cell.get(flag) for flag in flags):
            raise RegistryError(f"{where}: requests nothing (no conditions and no {'/'.join(flags)})")
        if conditions:
            for corpus in cell["corpora"]:
                if config["corpora"][corpus]["train_rows"] == 0:
                    raise RegistryError(f"{where}.corpora: {corpus!r} is a probe-only pool (train_rows 0)")


def _check_schedule(config: Mapping[str, Any]) -> None:
    """A schedule that can work: ``lr_min <= lr_max`` and a warm-up no longer than any training run."""
    training, where = config["training"], "training.schedule"
    schedule = training["schedule"]
    if schedule["lr_min"] > schedule["lr_max"]:
        raise RegistryError(
            f"{where}.lr_min: {schedule['lr_min']} is above {where}.lr_max {schedule['lr_max']}"
        )
    for name, corpus in sorted(config["corpora"].items()):
        if not corpus["train_rows"]:  # null: every eligible row (unknown here); 0: a probe-only pool
            continue
        steps = total_steps(corpus["train_rows"], training["global_batch_size"], training["epochs"])
        if schedule["warmup_steps"] > steps:
            raise RegistryError(
                f"{where}.warmup_steps: {schedule['warmup_steps']} warm-up steps exceed the {steps} "
                f"optimizer steps of corpus {name} (corpora.{name}.train_rows {corpus['train_rows']}, "
                f"training.global_batch_size {training['global_batch_size']}, epochs {training['epochs']})"
            )
    toy_base = config.get("toy_base")
    if toy_base and toy_base["warmup_steps"] > toy_base["steps"]:
        raise RegistryError(
            f"toy_base.warmup_steps: {toy_base['warmup_steps']} exceeds toy_base.steps {toy_base['steps']}"
        )


def _check_models(config: Mapping[str, Any]) -> None:
    for name in sorted(config.get("toy_base", {}).get("lbl_coefficient_by_model", {})):
        _known("model", name, config["models"], f"toy_base.lbl_coefficient_by_model.{name}")
    for name, model in sorted(config["models"].items()):
        if model["top_k"] > model["experts"]:
            raise RegistryError(
                f"models.{name}.top_k: {model['top_k']} is above models.{name}.experts {model['experts']}"
            )
        keep = model["hub"].get("keep_moe_layers", model["moe_layers"])
        if keep != model["moe_layers"]:  # the cut base must have the MoE layers the rest of the DAG reads
            raise RegistryError(
                f"models.{name}.hub.keep_moe_layers: {keep} differs from models.{name}.moe_layers "
                f"{model['moe_layers']}"
            )


def own_run(name: str) -> str:
    """The run name (``condition`` of its Evaluation and Probe, path component) of own checkpoint ``name``."""
    return f"{OWN}/{name}"


def own_name(run: str) -> str | None:
    """The ``own_checkpoints`` name of an own run (``own/{name}``); None for a base or trained run."""
    prefix, _, name = run.partition("/")
    return name if prefix == OWN and name else None


def _check_own_checkpoints(config: Mapping[str, Any]) -> None:
    """Each own checkpoint names a registry model and corpus and an HF checkpoint folder.

    The folder is checked here, where the error can name the key, rather than as a job's missing input.
    """
    for name, entry in sorted(config.get("own_checkpoints", {}).items()):
        where = f"own_checkpoints.{name}"
        _known("model", entry["model"], config["models"], f"{where}.model")
        _known("corpus", entry["corpus"], config["corpora"], f"{where}.corpus")
        folder = Path(entry["path"])
        if not (folder / "config.json").is_file():
            found = "a folder without config.json" if folder.is_dir() else "no such folder"
            raise RegistryError(f"{where}.path: {entry['path']}: {found} (an HF checkpoint folder holds one)")


def add_own_table(config: dict[str, Any]) -> None:
    """Add table ``OWN_TABLE`` of the configured own checkpoints, in place; none configured, no table.

    Its cells name each checkpoint with its model and corpus; ``paper_rows`` names the paper's
    per-benchmark tables (``PAPER_ROW_TABLES``) of those models, whose published rows it sets beside.
    """
    own = config.get("own_checkpoints", {})
    if not own:
        return
    cells = [
        {"models": [entry["model"]], "corpora": [entry["corpus"]], "own_checkpoints": [name]}
        for name, entry in sorted(own.items())
    ]
    models = {entry["model"] for entry in own.values()}
    paper_rows, conditions = {}, set()
    for table_id in PAPER_ROW_TABLES:
        table_cells = config["tables"].get(table_id, {}).get("cells", [])
        named = {model for cell in table_cells for model in cell["models"]}
        if len(named) == 1 and named <= models:
            paper_rows[table_id] = named.pop()
            conditions |= {condition for cell in table_cells for condition in cell.get("conditions", [])}
    config["tables"][OWN_TABLE] = {
        "title": "Own checkpoints beside the paper's rows (Tables 16-19 layout), with routing retention",
        "cells": cells,
        "paper_rows": paper_rows,  # paper table -> its model
        "lists_conditions": sorted(conditions),  # the paper rows' methods, for their labels
    }


def check_references(config: Mapping[str, Any]) -> None:
    """Check cross-references and values of a schema-valid config; raise RegistryError naming the key."""
    _check_conditions(config)
    _check_sources(config)
    _check_cells(config, "tables")
    _check_cells(config, "figures")
    _check_rehearsal(config)
    _check_schedule(config)
    _check_models(config)
    _check_own_checkpoints(config)


def non_finite_numbers(node: Any, path: str = "") -> list[tuple[str, float]]:
    """``(dotted key, value)`` of every NaN or infinite number under ``node``.

    YAML reads ``.inf`` and ``.nan`` as floats, and JSON Schema's bounds let NaN through (every
    comparison with it is false): ``lr_max: .inf`` once trained a NaN model.
    """
    if isinstance(node, float):
        return [] if math.isfinite(node) else [(path or "(top level)", node)]
    if isinstance(node, Mapping):
        items: Iterable[tuple[Any, Any]] = node.items()
    elif isinstance(node, list):
        items = enumerate(node)
    else:
        return []
    return [found for key, value in items for found in non_finite_numbers(value, _dotted(path, key))]


def _dotted(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def _duplicate_keys(node: Any, path: str = "") -> Iterable[tuple[str, int, int]]:
    """``(dotted key, first line, repeated line)`` of every key repeated within one YAML mapping."""
    import yaml

    if isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            yield from _duplicate_keys(item, _dotted(path, index))
    if not isinstance(node, yaml.MappingNode):
        return
    seen: dict[str, int] = {}
    for key, value in node.value:
        name, line, dotted = str(key.value), key.start_mark.line + 1, _dotted(path, key.value)
        if name in seen:
            yield dotted, seen[name], line
        seen.setdefault(name, line)
        yield from _duplicate_keys(value, dotted)


def _yaml_error_place(path: str | Path, error: Exception) -> str:
    """``file:line`` of a YAML error (the line where the parser gave up), or the file alone."""
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    return f"{path}:{mark.line + 1}" if mark is not None else str(path)


def _yaml_problem(error: Exception) -> str:
    """The parser's problem, with the construct it was reading and where that began (an unclosed bracket)."""
    problem = getattr(error, "problem", None) or str(error)
    context, mark = getattr(error, "context", None), getattr(error, "context_mark", None)
    return f"{problem} ({context} at line {mark.line + 1})" if context and mark is not None else problem


def read_config_file(path: str | Path) -> dict[str, Any]:
    """One config file's top-level mapping; refuses, naming the file, what Snakemake would misread.

    A YAML syntax error is named with its file and line (Snakemake's own loader says only
    "not valid JSON or YAML"); a file whose top level is not a mapping, and a key repeated in
    one mapping (PyYAML, and so Snakemake, silently keeps the last), are refused too.
    """
    import yaml

    try:
        text = Path(path).read_text()
    except OSError as error:
        raise RegistryError(f"{path}: {error.strerror}") from None
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: a tenth of the DAG's start-up
    try:
        node = yaml.compose(text, Loader=loader)
        config = yaml.load(text, Loader=loader)
    except yaml.YAMLError as error:
        place, problem = _yaml_error_place(path, error), _yaml_problem(error)
        raise RegistryError(f"{place}: not valid YAML: {problem}") from None
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise RegistryError(f"{path}: a config file holds a mapping of keys, not a {type(config).__name__}")
    if repeated := list(_duplicate_keys(node)):
        key, first, line = repeated[0]
        raise RegistryError(f"{path}:{line}: duplicate config key {key} (first set at line {first})")
    return config


def merge_config(config: dict[str, Any], overlay: Mapping[str, Any]) -> None:
    """Merge ``overlay`` into ``config`` in place, key by key, as Snakemake merges config files."""
    for key, value in overlay.items():
        if isinstance(value, Mapping) and isinstance(config.get(key), dict):
            merge_config(config[key], value)
        else:
            config[key] = copy.deepcopy(value)


def load_config(
    files: Iterable[str | Path], overrides: Mapping[str, Any] | None = None, schema: str | Path = SCHEMA
) -> dict[str, Any]:
    """The registry: ``files`` (``config.yaml``, then each overlay) read and merged in order,
    ``overrides`` (Snakemake's ``--config``) last, validated, seeds capped.

    The one way the config is loaded: by the workflow (``rules/common.smk``), by every command that
    reads the whole registry, and by the tests. Raises ``RegistryError`` naming file, line or key.
    """
    config: dict[str, Any] = {}
    for path in files:
        merge_config(config, read_config_file(path))
    merge_config(config, overrides or {})
    validate_config(config, str(schema))
    cap_seeds(config)
    drop_cells_not_built(config)
    add_own_table(config)
    return config


def drop_cells_not_built(config: dict[str, Any]) -> None:
    """Remove the cell groups this run does not build: those whose ``scales`` leave out
    ``config["scale"]``, and the optional ones ``include_optional`` does not name. Nothing
    downstream sees them."""
    built = {None, *config.get("include_optional", [])}  # None: a cell group that is not optional

    def kept(cell: Mapping[str, Any]) -> bool:
        return config["scale"] in cell.get("scales", (config["scale"],)) and cell.get("optional") in built

    for section in ("tables", "figures"):
        for entry in config[section].values():
            entry["cells"] = [cell for cell in entry["cells"] if kept(cell)]


def shipped_config_files(root: str | Path, toy: bool, claims: bool = False) -> list[Path]:
    """The config files of a checkout's profiles: ``config.yaml``; at toy scale the toy overlay
    (``profiles/local``), with ``claims`` also the claims overlay (``profiles/claims``)."""
    if claims and not toy:
        raise ValueError("the claims overlay is a toy-scale profile")
    overlays = [TOY_OVERLAY] * toy + [CLAIMS_OVERLAY] * claims
    return [Path(root) / name for name in (CONFIG_FILE, *overlays)]


def condition_kinds(conditions: Mapping[str, Mapping[str, Any]]) -> dict[tuple, list[str]]:
    """The registry's conditions by what a training does differently: each intervention with a base
    or a shuffled prior (``(intervention, shuffled)``, None without a prior), and each setting a
    condition changes (``(setting,)``: the expert-bias update rate, the gate weights). A condition
    belongs to one intervention kind and to the kind of each of its settings."""
    kinds: dict[tuple, list[str]] = {}
    for name, condition in conditions.items():
        prior = condition.get("prior")
        kinds.setdefault((condition["intervention"], None if prior is None else prior != BASE), []).append(
            name
        )
        for setting in condition.get("settings", {}):
            kinds.setdefault((setting,), []).append(name)
    return kinds


def outputs(config: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """All tables and figures by id."""
    return {**config["tables"], **config["figures"]}


def closure(config: Mapping[str, Any], output_id: str) -> Closure:
    """Every unit of work table/figure ``output_id`` needs, derived dependencies included."""
    entries = outputs(config)
    if output_id not in entries:
        raise RegistryError(f"unknown table or figure {output_id!r} (known: {', '.join(sorted(entries))})")
    return cells_closure(config, entries[output_id]["cells"])


def cells_closure(config: Mapping[str, Any], cells: Iterable[Mapping[str, Any]]) -> Closure:
    """Every unit of work a list of cells (a table's, a figure's, the rehearsal's) needs, derived
    dependencies included."""
    trainings: set[Training] = set()
    probes: set[Probe] = set()
    evaluations: set[Evaluation] = set()
    priors: set[Prior] = set()
    validations: set[tuple[str, str]] = set()
    for cell in cells:
        for model in cell["models"]:
            if cell.get("base_eval"):
                evaluations.add(Evaluation(model, None, BASE, None))
            for corpus in cell["corpora"]:
                if cell.get("base_probe"):
                    probes.add(Probe(model, corpus, BASE, None))
                if cell.get("prior"):
                    priors.add(Prior(model, corpus, BASE))
                if cell.get("shuffled_prior"):
                    validations.add((model, corpus))
                for name in cell.get("own_checkpoints", []):  # evaluated and probed; trained elsewhere
                    evaluations.add(Evaluation(model, corpus, own_run(name), None))
                    probes.add(Probe(model, corpus, own_run(name), None))
                for condition in cell.get("conditions", []):
                    for seed in cell.get("eval_seeds", []):
                        evaluations.add(Evaluation(model, corpus, condition, seed))
                        trainings.add(Training(model, corpus, condition, seed))
                    for seed in cell.get("probe_seeds", []):
                        probes.add(Probe(model, corpus, condition, seed))
                        trainings.add(Training(model, corpus, condition, seed))
    # Derived: every trained probe is compared with the base partition.
    probes |= {Probe(p.model, p.corpus, BASE, None) for p in list(probes)}
    # Derived: a training reads the prior its condition names.
    for training in trainings:
        kind = config["conditions"][training.condition].get("prior")
        if kind is not None:
            priors.add(Prior(training.model, training.corpus, kind))
    # Derived: shuffled priors are built from the base prior and the base partition.
    for model, corpus in validations:
        priors |= {Prior(model, corpus, kind) for kind in ("shuffled_within", "shuffled_global")}
    for prior in list(priors):
        if prior.kind != BASE:
            priors.add(Prior(prior.model, prior.corpus, BASE))
            probes.add(Probe(prior.model, prior.corpus, BASE, None))
    corpora = (
        {t.corpus for t in trainings}
        | {p.corpus for p in probes}
        | {p.corpus for p in priors}
        | {e.corpus for e in evaluations if e.corpus is not None}
    )
    return Closure(
        corpora=frozenset(corpora),
        priors=frozenset(priors),
        prior_validations=frozenset(validations),
        trainings=frozenset(trainings),
        probes=frozenset(probes),
        evaluations=frozenset(evaluations),
    )


def total_steps(num_rows: int, global_batch_size: int, epochs: int) -> int:
    """Optimizer steps of a run: ``ceil(epochs * N / global_batch_size)`` (the last batch may be short)."""
    return -(-epochs * num_rows // global_batch_size)


def cap_seeds(config: dict[str, Any]) -> None:
    """Keep the first ``seeds_per_cell`` seeds of every cell, in place (null keeps them all).

    Applied once after validation, so the closure, the rules and the report code
    all see the same (smaller) grid; a cell whose paper seeds are, e.g., only
    s43 keeps s43. An entry with ``keep_seeds: true`` (the claims table, which reads
    each difference against its seed spread) keeps every seed it lists at every scale;
    its runs at the first seed are the ones the capped tables share.
    """
    cap = config.get("seeds_per_cell")
    if cap is None:
        return
    for section in ("tables", "figures"):
        for entry in config[section].values():
            if entry.get("keep_seeds"):
                continue
            for cell in entry["cells"]:
                for key in ("eval_seeds", "probe_seeds"):
                    if key in cell:
                        cell[key] = cell[key][:cap]


def _validator_filling_defaults(schema: Mapping[str, Any]) -> Any:
    """The schema's jsonschema validator class, whose ``properties`` also set absent keys' defaults."""
    import jsonschema

    base = jsonschema.validators.validator_for(schema)

    def properties(validator: Any, properties: Mapping[str, Any], instance: Any, schema: Any) -> Any:
        if isinstance(instance, dict):
            for name, subschema in properties.items():
                if "default" in subschema:
                    instance.setdefault(name, copy.deepcopy(subschema["default"]))
        yield from base.VALIDATORS["properties"](validator, properties, instance, schema)

    return jsonschema.validators.extend(base, {"properties": properties})


def validate_config(config: dict[str, Any], schema: str | Path = SCHEMA) -> None:
    """Validate ``config`` (finite numbers, the JSON schema, then references and values); one-line
    errors naming the key.

    Fills the schema's defaults as ``snakemake.utils.validate`` does, with jsonschema alone: the
    stage environments that load the registry (the eval env's tests) have no Snakemake.
    """
    import jsonschema

    if found := non_finite_numbers(config):
        key, value = found[0]
        raise RegistryError(f"config key {key}: {value} is not a finite number")
    schema_doc = json.loads(Path(schema).read_text())
    errors = list(_validator_filling_defaults(schema_doc)(schema_doc).iter_errors(config))
    if errors:
        best = jsonschema.exceptions.best_match(errors)
        path = ".".join(str(part) for part in best.absolute_path) or "(top level)"
        raise RegistryError(f"config key {path}: {best.message}") from None
    try:
        check_references(config)
    except RegistryError as error:
        raise RegistryError(f"config key {error}") from None


def toy_model_sizes(model: Mapping[str, Any]) -> dict[str, Any]:
    """A toy model's sizes: its ``toy`` block plus the registry's E, k, shared experts and MoE layers."""
    sizes = dict(model["toy"])
    sizes["num_layers"] = sizes["first_dense_layers"] + model["moe_layers"]
    sizes["num_experts"] = model["experts"]
    sizes["top_k"] = model["top_k"]
    sizes["shared_experts"] = model["shared_experts"]
    return sizes
