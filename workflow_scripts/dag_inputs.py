"""What the rules hand their jobs: input files, config slices and command-line arguments.

Pure functions of the validated registry and wildcard values, called by ``rules/common.smk``
and the rules; they open no file and read no global config, so they are tested without Snakemake.
Paths are rule patterns below ``layout.RESULTS``.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from workflow_scripts import hub, layout, registry
from workflow_scripts.report.inputs import declared_files

# The keys of each config section a command reads, and the builder that parses them there.
SAMPLING_KEYS = ("temperature", "top_p", "max_new_tokens", "repeats", "base_seed")  # evaluate/generation.py
# train/cli.py train_config, train/megatron/settings.py
TRAINING_KEYS = (
    "epochs",
    "global_batch_size",
    "micro_batch_size",
    "sequence_length",
    "packing",
    "loss_on",
    "precision",
    "checkpoint_every_steps",
    "expert_bias_update_rate",
    "optimizer",
    "schedule",
)
RETENTION_KEYS = (  # probe/cli.py run_retention
    "divergence_log_base",
    "null_model",
    "edge_fraction_sweep",
    "robustness_detectors",
    "detector_seeds",
)
# What the report reads of the registry's shared sections (workflow_scripts/report/, score_aggregates.py).
REPORT_SLICES = {
    "benchmarks": ("name", "family", "overall9"),
    "evaluation": ("repeats",),
    "probe": (
        "detector",
        "edge_fraction",
        "edge_fraction_sweep",
        "robustness_detectors",
        "detector_seeds",
        "null_model",
    ),
}
# The files of a corpus' build, by output name.
CORPUS_FILES = {"train": layout.SPLIT_FILE, "probe": layout.POOL_FILE, "report": layout.CORPUS_REPORT}


def config_slice(section: Mapping[str, Any], keys: Iterable[str]) -> str:
    """The named keys of a config section as JSON (absent optional ones left out): what one command reads.

    A job's params then hold only values its command uses, so Snakemake's params trigger reruns it
    when one of them changes, never for another key of the same section.
    """
    return json.dumps({key: section[key] for key in keys if key in section}, sort_keys=True)


def condition_slice(config: Mapping[str, Any], condition: str) -> str:
    """What a training job reads of ``condition`` (``registry.job_condition``), as JSON."""
    return json.dumps(registry.job_condition(config, condition), sort_keys=True)


def config_files(loaded: Iterable[str | Path], overlays: Iterable[str | Path], cwd: Path) -> list[str]:
    """The config files Snakemake merged, in precedence order: ``config.yaml``, then each overlay given.

    ``loaded`` is every file Snakemake read (overlays included, in its own order); paths below
    ``cwd`` are made relative, so that a manifest names them as a user types them.
    """
    given = [str(path) for path in overlays]
    ordered = [str(path) for path in loaded if str(path) not in given] + given
    return [os.path.relpath(path, cwd) if Path(path).is_relative_to(cwd) else path for path in ordered]


def cache_refusal(
    config: Mapping[str, Any], requested: list[str] | None, lock: hub.Lock | None = None
) -> str | None:
    """Why ``--cache`` (``requested``: the rules named, ``[]`` for all, None without it) is refused, or None.

    At paper scale a cached download keys on its revision, so a ref (``main``) that neither the
    config nor the lock (``hub.lock.yaml``) turns into a commit could not tell one hub state from
    another.
    """
    if requested is None or config["scale"] != "paper":
        return None
    sections = ["datasets", "models"]
    if not requested or "download_benchmark" in requested:
        sections.append("benchmarks")
    moving = hub.unlocked(config, lock or {}, sections)
    if not moving:
        return None
    return (
        f"--cache: {', '.join(moving)} name a moving ref, not a commit, so a cached output could "
        f"not tell one hub state from another. Run '{hub.LOCK_COMMAND}' (it writes {hub.LOCK_FILE}, "
        "which the downloads read), or run without --cache."
    )


def hub_revision(config: Mapping[str, Any], lock: hub.Lock, section: str, name: str) -> str:
    """The revision the download of ``section.name`` passes: the config's commit, else the lock's.

    Either way the job's params hold the same commit, so writing the locked commit into
    config.yaml reruns nothing (``workflow_scripts.hub``).
    """
    return hub.locked_revision(hub.hub_source(config, section, name), lock)


def alternatives(values: Iterable[str]) -> str:
    """Regex alternation of registry ids, for wildcard constraints; none matches nothing."""
    return "|".join(sorted(values)) or layout.NEVER


def corpus_files(corpus: str) -> dict[str, str]:
    return {key: layout.rule_path("corpus", corpus=corpus, name=name) for key, name in CORPUS_FILES.items()}


def corpus_spec(config: Mapping[str, Any], corpus: str) -> str:
    """The corpus entry plus the probe-pool settings as JSON: exactly what one build reads."""
    entry, pool = config["corpora"][corpus], config["probe_pool"]
    spec = {key: entry[key] for key in ("domain", "filter", "train_rows", "probe_tokens")}
    spec |= {"chars_per_token": pool["chars_per_token"], "probe_seed": pool["seed"]}
    return json.dumps(spec, sort_keys=True)


def toy_pretraining(config: Mapping[str, Any], model: str) -> str:
    """The toy_base section for one model, as JSON: its own load-balancing weight, no other model's,
    and the load-balancing term's declaration (``router_terms``)."""
    settings = dict(config["toy_base"])
    by_model = settings.pop("lbl_coefficient_by_model", {})
    settings["lbl_coefficient"] = by_model.get(model, settings["lbl_coefficient"])
    settings["lbl_term"] = registry.router_terms(config)["load_balancing"].declaration()
    return json.dumps(settings, sort_keys=True)


def detector(config: Mapping[str, Any]) -> str:
    """The community detector of the main results (probe.detector) with the edge fraction rho, as JSON."""
    found = config["probe"]["detector"]
    keys = ("name", "resolution", "seed", "tolerance", "max_iterations")
    return json.dumps(
        {**{key: found[key] for key in keys}, "rho": config["probe"]["edge_fraction"]}, sort_keys=True
    )


def generate_options(evaluation: Mapping[str, Any]) -> str:
    """``evaluate generate``'s shard size and the options of the configured backend only, so that a
    setting of the other backend reruns no generation (hf batches prompts; vllm runs data-parallel
    engines)."""
    shards = f"--shard-prompts {evaluation['shard_prompts']}"
    if evaluation["backend"] == "hf":
        return f"--batch-size {evaluation['batch_size']} {shards}"
    engine = shlex.quote(json.dumps(evaluation["engine"], sort_keys=True))
    return f"--data-parallel {evaluation['data_parallel']} --engine {engine} {shards}"


def sandbox_limits(evaluation: Mapping[str, Any]) -> str:
    """The code sandbox's limits, its timeout included, as JSON."""
    return json.dumps(
        {"timeout_s": evaluation["code_timeout_seconds"], **evaluation["sandbox"]}, sort_keys=True
    )


def prior_file(model: str, corpus: str, kind: str) -> str:
    return layout.rule_path("prior", model=model, corpus=corpus, name=layout.PRIOR_FILES[kind])


def _own_entry(config: Mapping[str, Any], model: str, name: str) -> Mapping[str, Any]:
    """The ``own_checkpoints`` entry ``name``; refused where a path asks for it under another model,
    or where its folder lies under the results root, whose every file a job of the workflow writes."""
    entry = config["own_checkpoints"][name]
    if entry["model"] != model:
        raise registry.RegistryError(
            f"own_checkpoints.{name}.model: {entry['model']!r}, not {model!r} as the requested path says"
        )
    if Path(entry["path"]).resolve().is_relative_to(Path(layout.RESULTS).resolve()):
        raise registry.RegistryError(
            f"own_checkpoints.{name}.path: {entry['path']} is under {layout.RESULTS}/; "
            "keep your checkpoint outside it"
        )
    return entry


def checkpoint_of(config: Mapping[str, Any], model: str, evaluated: str) -> str:
    """The base model (``base``), an own checkpoint's folder (``own/{name}``, config key
    ``own_checkpoints``), or the trained checkpoint ``{corpus}/{condition}/s{seed}``."""
    if evaluated == registry.BASE:
        return layout.rule_path("model", model=model, name=layout.BASE_MODEL)
    own = registry.own_name(evaluated)
    if own is not None:
        return _own_entry(config, model, own)["path"]
    corpus, condition, seed = evaluated.split("/")
    return layout.rule_path(
        "checkpoint", model=model, corpus=corpus, condition=condition, seed=seed.removeprefix("s")
    )


def probed_checkpoint(config: Mapping[str, Any], model: str, corpus: str, run: str) -> str:
    """The checkpoint a probe reads: ``run`` is ``base``, ``own/{name}`` or ``{condition}/s{seed}`` on
    ``corpus``."""
    unseeded = run == registry.BASE or registry.own_name(run) is not None
    return checkpoint_of(config, model, run if unseeded else f"{corpus}/{run}")


def evaluated_identity(config: Mapping[str, Any], model: str, evaluated: str) -> str:
    """What an evaluation summary records as its identity (JSON): model, corpus, condition, seed.

    An own checkpoint's corpus is its entry's (its ID/OOD split); it has no seed.
    """
    own = registry.own_name(evaluated)
    if evaluated == registry.BASE:
        run: dict[str, Any] = {"corpus": None, "condition": registry.BASE, "seed": None}
    elif own is not None:
        run = {"corpus": _own_entry(config, model, own)["corpus"], "condition": evaluated, "seed": None}
    else:
        corpus, condition, seed = evaluated.split("/")
        run = {"corpus": corpus, "condition": condition, "seed": int(seed.removeprefix("s"))}
    return json.dumps({"model": model, **run}, sort_keys=True)


def condition_prior(config: Mapping[str, Any], model: str, corpus: str, condition: str) -> dict[str, str]:
    """The prior files a training reads (prior, its meta, a shuffle's record), or none without a prior."""
    kind = config["conditions"][condition].get("prior")
    if kind is None:
        return {}
    files = {
        "prior": prior_file(model, corpus, kind),
        "prior_meta": layout.rule_path("prior", model=model, corpus=corpus, name=layout.PRIOR_META),
    }
    if kind != registry.BASE:  # a shuffled prior is checked against the checksum its shuffle job recorded
        files["shuffle_record"] = layout.rule_path(
            "prior", model=model, corpus=corpus, name=layout.PRIOR_VALIDATION
        )
    return files


def prior_arguments(input: Mapping[str, str]) -> str:
    """``--prior``, ``--prior-meta`` and ``--shuffle-record`` of the files condition_prior declared."""
    flags = {"prior": "--prior", "prior_meta": "--prior-meta", "shuffle_record": "--shuffle-record"}
    return " ".join(
        f"{flag} {shlex.quote(str(input[name]))}" for name, flag in flags.items() if name in input
    )


def run_training(training: Mapping[str, Any], condition: str) -> str:
    """The training settings one run reads, as JSON: with ``preempt_after_steps`` where the
    rehearsal's ``training.preempt`` names the run's condition (train/megatron/settings.py)."""
    found = {key: training[key] for key in ("parallelism", *TRAINING_KEYS) if key in training}
    preempt = training.get("preempt")
    if preempt and condition in preempt["conditions"]:
        found["preempt_after_steps"] = preempt["after_steps"]
    return json.dumps(found, sort_keys=True)


def training_arguments(
    config: Mapping[str, Any], wildcards: Mapping[str, str], input: Mapping[str, str]
) -> str:
    """What a Megatron run reads and where it resumes, as arguments: its claim (binding the work
    folder to the run's settings and inputs, train/megatron/resume.py) and its training take the same."""
    condition = condition_slice(config, wildcards["condition"])
    training = run_training(config["training"], wildcards["condition"])
    work = layout.rule_path(
        "megatron_work", **{key: wildcards[key] for key in ("model", "corpus", "condition", "seed")}
    )
    arguments = [
        f"--hf-base {shlex.quote(input['hf_base'])} --megatron-base {shlex.quote(input['megatron_base'])}",
        f"--dataset {shlex.quote(input['dataset'])} --split {shlex.quote(input['split'])}",
        f"--condition {shlex.quote(condition)} --training {shlex.quote(training)} --seed {wildcards['seed']}",
        prior_arguments(input),
        f"--bias-in-gate-weights {str(config['prior']['bias_in_gate_weights']).lower()}",
        f"--work {shlex.quote(work)}",
    ]
    return " ".join(argument for argument in arguments if argument)


def probe_result(probe: registry.Probe) -> str:
    """The graph file a probe ends in: the base partition, or a trained run's retention metrics."""
    if probe.condition == registry.BASE:
        return str(layout.partition_path(layout.RESULTS, probe.model, probe.corpus))
    return str(layout.metrics_path(layout.RESULTS, probe))


def report_files(config: Mapping[str, Any], output_id: str) -> list[str]:
    """Exactly the result files a table's or figure's report job reads (workflow_scripts/report/inputs.py)."""
    return [str(path) for path in declared_files(config, output_id, layout.RESULTS)]


def closure_inputs(config: Mapping[str, Any], output_id: str) -> list[str]:
    """The files of every stage behind one table or figure, the ones its report job reads included."""
    closure = registry.closure(config, output_id)
    files = [path for corpus in sorted(closure.corpora) for path in corpus_files(corpus).values()]
    files += sorted(prior_file(p.model, p.corpus, p.kind) for p in closure.priors)
    prior_pairs = {(p.model, p.corpus) for p in closure.priors}
    files += sorted(str(layout.prior_file(layout.RESULTS, m, c, layout.PRIOR_STATS)) for m, c in prior_pairs)
    files += sorted(
        str(layout.prior_file(layout.RESULTS, m, c, layout.PRIOR_VALIDATION))
        for m, c in closure.prior_validations
    )
    files += sorted(probe_result(p) for p in closure.probes)
    files += sorted(str(layout.summary_path(layout.RESULTS, e)) for e in closure.evaluations)
    files += sorted(str(layout.checkpoint_dir(layout.RESULTS, t)) for t in closure.trainings)
    return list(dict.fromkeys(files + report_files(config, output_id)))


def report_config(config: Mapping[str, Any], output_id: str) -> str:
    """The registry slice a table or figure reads, as JSON: its own entry, the models, corpora and
    conditions its cells name, the fields of the shared sections the report code reads, and for the
    claims table the ``claim_rules`` its verdicts use."""
    section = "tables" if output_id in config["tables"] else "figures"
    entry = config[section][output_id]
    named: dict[str, set[str]] = {
        "models": set(),
        "corpora": set(),
        "conditions": set(entry.get("lists_conditions", [])),
    }
    for cell in entry["cells"]:
        for key, ids in named.items():
            ids.update(cell.get(key, []))
    sliced = {key: {i: spec for i, spec in config[key].items() if i in ids} for key, ids in named.items()}
    benchmark_keys = REPORT_SLICES["benchmarks"]
    shared = {
        "benchmarks": {
            name: {k: spec[k] for k in benchmark_keys} for name, spec in config["benchmarks"].items()
        },
        "evaluation": {k: config["evaluation"][k] for k in REPORT_SLICES["evaluation"]},
        "probe": {k: config["probe"][k] for k in REPORT_SLICES["probe"]},
    }
    tables_and_figures: dict[str, Any] = {"tables": {}, "figures": {}}
    tables_and_figures[section] = {output_id: entry}
    # The claims table's verdicts read claim_rules; no other output does.
    rules = {"claim_rules": config["claim_rules"]} if output_id == "claims" else {}
    return json.dumps(
        {"scale": config["scale"], **sliced, **shared, **tables_and_figures, **rules}, sort_keys=True
    )


def report_inputs(config: Mapping[str, Any], output_id: str, root: Path) -> dict[str, Any]:
    """A table's or figure's result files, plus the paper's published values (and notes on them)
    where the checkout at ``root`` has them; for the own-checkpoint table, the paper tables whose
    rows it sets beside (``paper_rows``)."""
    inputs: dict[str, Any] = {"files": report_files(config, output_id)}
    if output_id in config["tables"]:
        for name, path in layout.reference_files(output_id).items():
            if (root / path).is_file():
                inputs[name] = path
        paper_rows = config["tables"][output_id].get("paper_rows", {})
        if paper_rows:
            inputs["paper_rows"] = [
                layout.reference_files(table)["reference"] for table in sorted(paper_rows)
            ]
    return inputs


def reference_arguments(input: Mapping[str, Any]) -> str:
    """``--reference``, ``--reference-notes`` and ``--paper-rows`` of the files report_inputs declared."""
    names = [name for name in (*layout.reference_files(""), "paper_rows") if name in input]
    return " ".join(
        f"--{name.replace('_', '-')} {shlex.join(map(str, _listed(input[name])))}" for name in names
    )


def _listed(value: Any) -> list[Any]:
    """A named input as a list: one file, or the files of a list input."""
    return list(value) if isinstance(value, list | tuple) else [value]


def output_files(config: Mapping[str, Any], output_id: str) -> list[str]:
    """The files of one table (csv, md, tex) or figure (csv, png, pdf)."""
    if output_id in config["tables"]:
        return [layout.rule_path("table", suffix, table=output_id) for suffix in layout.TABLE_SUFFIXES]
    return [layout.rule_path("figure", suffix, figure=output_id) for suffix in layout.FIGURE_SUFFIXES]


def all_targets(config: Mapping[str, Any]) -> list[str]:
    """The provenance manifest of every table and figure: building them builds everything."""
    return [
        layout.rule_path("provenance", ".json", output=output) for output in sorted(registry.outputs(config))
    ]


def rehearsal_targets(config: Mapping[str, Any]) -> list[str]:
    """The rehearsal's default target: the manifests of its outputs, then its cells' results (each
    probed run's retention metrics, each evaluated run's scores), so no other table of theirs is built."""
    rehearsal = config[registry.REHEARSAL]
    cells = registry.cells_closure(config, rehearsal["cells"])
    manifests = [layout.rule_path("provenance", ".json", output=output) for output in rehearsal["outputs"]]
    probes = sorted(probe_result(p) for p in cells.probes if p.condition != registry.BASE)
    scores = sorted(str(layout.summary_path(layout.RESULTS, e)) for e in cells.evaluations)
    return manifests + probes + scores
