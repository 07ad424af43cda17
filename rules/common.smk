# Registry loading, wildcard constraints, input functions and target lists.
import json
import os
import shlex
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError

sys.path.insert(0, workflow.basedir)

from workflow_scripts import forkserver, layout, registry
from workflow_scripts.report.inputs import declared_files

registry.check_config_files(workflow.configfiles)  # duplicate keys, which the YAML parser let pass
registry.validate_config(config, f"{workflow.basedir}/workflow_scripts/schemas/config.schema.json")
registry.cap_seeds(config)

# Every job imports this checkout's workflow_scripts, whichever environment runs it (a conda env,
# a stage module's venv, the Megatron image): environments hold dependencies only, never a copy of
# the code that could go stale against the commit provenance records.
shell.prefix(f"set -euo pipefail; export PYTHONPATH={shlex.quote(workflow.basedir)}${{{{PYTHONPATH:+:$PYTHONPATH}}}}; ")


# Local runs may keep torch imported between jobs (workflow_scripts/forkserver.py).
onstart:
    if config["fork_server"] and workflow.local_exec:  # never for jobs a cluster executor submits
        forkserver.start("logs/forkserver.log")


onsuccess:
    forkserver.stop()


onerror:
    forkserver.stop()


def check_cache_revisions():
    """``--cache`` at paper scale needs hub commits in config.yaml, not refs (registry.moving_revisions)."""
    requested = workflow.workflow_settings.cache
    if requested is None or config["scale"] != "paper":
        return
    sections = ["datasets", "models"]
    if not requested or "download_benchmark" in requested:
        sections.append("benchmarks")
    moving = registry.moving_revisions(config, sections)
    if moving:
        raise WorkflowError(
            f"--cache: {', '.join(moving)} name a moving ref, not a commit, so a cached output could "
            "not tell one hub state from another. Write the commits the downloads recorded "
            "(revision_resolved in results/raw/*/*.manifest.json, results/models/*/manifest.json, "
            "results/benchmarks/*/manifest.json) into config.yaml, or run without --cache."
        )


check_cache_revisions()


def merged_config_files():
    """The config files Snakemake merged, in precedence order: config.yaml, then each overlay given."""
    overlays = [str(path) for path in workflow.overwrite_configfiles]
    loaded = [str(path) for path in workflow.configfiles if str(path) not in overlays]
    return [os.path.relpath(path) if Path(path).is_relative_to(Path.cwd()) else path for path in loaded + overlays]


def gpu_days(path):
    """A trained checkpoint or a generation: write-protected once written where ``protect_outputs``."""
    return protected(path) if config["protect_outputs"] else path


OUTPUTS = registry.outputs(config)
NEVER = "(?!x)x"  # a wildcard pattern nothing matches: the rule does not apply at this scale


def alternatives(values):
    """Regex alternation of registry ids, for wildcard constraints."""
    return "|".join(sorted(values)) or NEVER


# The training backend: hf (local, toy scale) or megatron (cluster, paper scale); both have rules,
# so every table and figure is a target at both scales.
TRAINING_BACKEND = config["training"]["backend"]
PARALLELISM = config["training"]["parallelism"]
# The SLURM request of one Megatron run (training and its launch check share it), covering all
# nodes of training.parallelism with one task per node; srun starts one torchrun on each.
MEGATRON_ALLOCATION = dict(
    nodes=PARALLELISM["nodes"],
    tasks=PARALLELISM["nodes"],
    gres=f"gpu:{PARALLELISM['gpus_per_node']}",
    tasks_per_gpu=0,
    mpi="srun",
    slurm_extra="--ntasks-per-node=1 --exclusive",
)
# The Megatron rules run in an apptainer image (training.container) or, without one, in their conda env.
MEGATRON_CONTAINER = config["training"]["container"]
MEGATRON_CONDA = None if MEGATRON_CONTAINER else "../envs/megatron.yaml"
MEGATRON_MODULES = [] if MEGATRON_CONTAINER else ["rpb/megatron"]
# The image has no SLURM, so the two launch rules are not wrapped in it (no container directive);
# their one-process steps enter the image themselves, and the launch runs
# `srun ... apptainer exec --nv <image> torchrun ...` (train/megatron/launch.py).
MEGATRON_IN_IMAGE = f"apptainer exec {shlex.quote(MEGATRON_CONTAINER)} " if MEGATRON_CONTAINER else ""
MEGATRON_LAUNCH_IMAGE = f" --container {shlex.quote(MEGATRON_CONTAINER)}" if MEGATRON_CONTAINER else ""
# A probed run is the base model or one trained (condition, seed).
PROBED_RUN = rf"base|(?:{alternatives(config['conditions'])})/s\d+"
# An evaluated run is the base model (once, not per corpus) or one trained (corpus, condition, seed).
EVALUATED_RUN = rf"base|(?:{alternatives(config['corpora'])})/(?:{alternatives(config['conditions'])})/s\d+"
BENCHMARK_ITEMS = expand(layout.rule_path("benchmark", name="items.parquet"), benchmark=sorted(config["benchmarks"]))


def config_slice(section, keys):
    """The named keys of a config section as JSON (absent ones left out): what one command reads.

    A job's params then hold only values its command uses, so Snakemake's params trigger reruns it
    when one of them changes, never for another key of the same section.
    """
    return json.dumps({key: section[key] for key in keys if key in section}, sort_keys=True)


SAMPLING = config_slice(
    config["evaluation"], ("temperature", "top_p", "max_new_tokens", "repeats", "base_seed")
)
# The keys of each config section a command reads (workflow_scripts/train/cli.py train_config,
# train/megatron/settings.py, train/objective.py Objective.from_condition, probe/cli.py run_retention).
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
LOCAL_TRAINING = config_slice(config["training"], ("backend", *TRAINING_KEYS))
MEGATRON_TRAINING = config_slice(config["training"], ("parallelism", *TRAINING_KEYS))
CONDITION_KEYS = ("intervention", "params", "settings", "prior")
RETENTION_PROBE = config_slice(
    config["probe"],
    ("divergence_log_base", "null_model", "edge_fraction_sweep", "robustness_detectors", "detector_seeds"),
)
# generate's options of the configured backend only (hf batches prompts; vllm runs data-parallel
# engines), so a setting of the other backend reruns no generation.
GENERATE_OPTIONS = {
    "hf": f"--batch-size {config['evaluation']['batch_size']}",
    "vllm": f"--data-parallel {config['evaluation']['data_parallel']}"
    f" --engine {shlex.quote(json.dumps(config['evaluation']['engine'], sort_keys=True))}",
}[config["evaluation"]["backend"]]
SANDBOX_LIMITS = json.dumps(
    {"timeout_s": config["evaluation"]["code_timeout_seconds"], **config["evaluation"]["sandbox"]}, sort_keys=True
)
DETECTOR = json.dumps(
    {
        "name": config["probe"]["detector"]["name"],
        "resolution": config["probe"]["detector"]["resolution"],
        "seed": config["probe"]["detector"]["seed"],
        "tolerance": config["probe"]["detector"]["tolerance"],
        "max_iterations": config["probe"]["detector"]["max_iterations"],
        "rho": config["probe"]["edge_fraction"],
    },
    sort_keys=True,
)


wildcard_constraints:
    corpus=alternatives(config["corpora"]),
    dataset=alternatives(config["datasets"]),
    model=alternatives(config["models"]),
    condition=alternatives(config["conditions"]),
    seed=r"\d+",
    output=alternatives(OUTPUTS),
    benchmark=alternatives(config["benchmarks"]),


def sourced_from(kind, ids):
    """Ids whose source is the hub (paper scale) or local generation (toy scale)."""
    scale_source = "toy" if config["scale"] == "toy" else "hub"
    return alternatives(ids if kind == scale_source else [])


def corpus_files(corpus):
    names = {"train": "train.parquet", "probe": "probe.parquet", "report": "report.json"}
    return {key: layout.rule_path("corpus", corpus=corpus, name=name) for key, name in names.items()}


def raw_file(wildcards):
    corpus = config["corpora"][wildcards.corpus]
    return layout.rule_path("raw", ".parquet", dataset=corpus["dataset"], subset=corpus["subset"])


def corpus_spec(wildcards):
    """The corpus entry plus the probe-pool settings: exactly what one build reads."""
    corpus = config["corpora"][wildcards.corpus]
    pool = config["probe_pool"]
    spec = {
        "domain": corpus["domain"],
        "filter": corpus["filter"],
        "train_rows": corpus["train_rows"],
        "probe_tokens": corpus["probe_tokens"],
        "chars_per_token": pool["chars_per_token"],
        "probe_seed": pool["seed"],
    }
    return json.dumps(spec, sort_keys=True)


def toy_model_spec(wildcards):
    """The toy sizes plus the registry's E, k, shared experts and MoE layers, as JSON."""
    return json.dumps(registry.toy_model_sizes(config["models"][wildcards.model]), sort_keys=True)


def toy_pretraining(wildcards):
    """The toy_base section for one model: its own load-balancing weight, no other model's, as JSON."""
    settings = dict(config["toy_base"])
    by_model = settings.pop("lbl_coefficient_by_model", {})
    settings["lbl_coefficient"] = by_model.get(wildcards.model, settings["lbl_coefficient"])
    return json.dumps(settings, sort_keys=True)


def prior_file(model, corpus, kind):
    return layout.rule_path("prior", model=model, corpus=corpus, name=layout.PRIOR_FILES[kind])


def checkpoint_of(model, run):
    """The base model, or the trained checkpoint ``{corpus}/{condition}/s{seed}``."""
    if run == registry.BASE:
        return layout.rule_path("model", model=model, name="base")
    corpus, condition, seed = run.split("/")
    return layout.rule_path("checkpoint", model=model, corpus=corpus, condition=condition, seed=seed.removeprefix("s"))


def probed_checkpoint(wildcards):
    run = wildcards.run if wildcards.run == registry.BASE else f"{wildcards.corpus}/{wildcards.run}"
    return checkpoint_of(wildcards.model, run)


def evaluated_checkpoint(wildcards):
    return checkpoint_of(wildcards.model, wildcards.run)


def evaluated_run(wildcards):
    """The identity an evaluation summary records: model, corpus, condition and seed (null for base)."""
    if wildcards.run == "base":
        run = {"corpus": None, "condition": registry.BASE, "seed": None}
    else:
        corpus, condition, seed = wildcards.run.split("/")
        run = {"corpus": corpus, "condition": condition, "seed": int(seed[1:])}
    return json.dumps({"model": wildcards.model, **run}, sort_keys=True)


def probe_result(probe):
    """The graph file a probe ends in: the base partition, or a trained run's retention metrics."""
    if probe.condition == registry.BASE:
        return str(layout.partition_path("results", probe.model, probe.corpus))
    return str(layout.metrics_path("results", probe))


def closure_inputs(output_id):
    """The files of every stage behind one table or figure, the ones its report job reads included."""
    closure = registry.closure(config, output_id)
    files = [path for corpus in sorted(closure.corpora) for path in corpus_files(corpus).values()]
    files += sorted(prior_file(p.model, p.corpus, p.kind) for p in closure.priors)
    prior_pairs = {(p.model, p.corpus) for p in closure.priors}
    files += sorted(str(layout.prior_file("results", m, c, "stats.json")) for m, c in prior_pairs)
    files += sorted(
        str(layout.prior_file("results", m, c, "prior_validation.json")) for m, c in closure.prior_validations
    )
    files += sorted(probe_result(p) for p in closure.probes)
    files += sorted(str(layout.summary_path("results", e)) for e in closure.evaluations)
    files += sorted(str(layout.checkpoint_dir("results", t)) for t in closure.trainings)
    return list(dict.fromkeys(files + report_files(output_id)))


def condition_prior(wildcards):
    """The prior files a training reads, or none for conditions without a prior."""
    kind = config["conditions"][wildcards.condition].get("prior")
    if kind is None:
        return {}
    files = {
        "prior": prior_file(wildcards.model, wildcards.corpus, kind),
        "prior_meta": str(layout.prior_file("results", wildcards.model, wildcards.corpus, "meta.json")),
    }
    if kind != "base":  # a shuffled prior is checked against the checksum its shuffle job recorded
        record = layout.prior_file("results", wildcards.model, wildcards.corpus, "prior_validation.json")
        files["shuffle_record"] = str(record)
    return files


def prior_arguments(wildcards, input):
    if "prior" not in input.keys():
        return ""
    arguments = f"--prior {input.prior} --prior-meta {input.prior_meta}"
    if "shuffle_record" in input.keys():
        arguments += f" --shuffle-record {input.shuffle_record}"
    return arguments


# What the report reads of the registry's shared sections (workflow_scripts/report/, evaluate/aggregate.py).
REPORT_SLICES = {
    "benchmarks": ("name", "family", "overall9"),
    "evaluation": ("repeats",),
    "probe": ("detector", "edge_fraction", "edge_fraction_sweep", "robustness_detectors", "detector_seeds", "null_model"),
}


def report_config(output_id):
    """The registry slice a table or figure reads, as JSON: its own entry, the models, corpora and
    conditions its cells name, the fields of the shared sections the report code reads, and for the
    claims table the ``claim_rules`` its verdicts use."""
    section = "tables" if output_id in config["tables"] else "figures"
    entry = config[section][output_id]
    named = {"models": set(), "corpora": set(), "conditions": set(entry.get("lists_conditions", []))}
    for cell in entry["cells"]:
        for key, ids in named.items():
            ids.update(cell.get(key, []))
    sliced = {key: {i: spec for i, spec in config[key].items() if i in ids} for key, ids in named.items()}
    shared = {
        "benchmarks": {name: {k: spec[k] for k in REPORT_SLICES["benchmarks"]} for name, spec in config["benchmarks"].items()},
        "evaluation": {k: config["evaluation"][k] for k in REPORT_SLICES["evaluation"]},
        "probe": {k: config["probe"][k] for k in REPORT_SLICES["probe"]},
    }
    tables_and_figures = {"tables": {}, "figures": {}}
    tables_and_figures[section] = {output_id: entry}
    # The claims table's verdicts read claim_rules; no other output does.
    rules = {"claim_rules": config["claim_rules"]} if output_id == "claims" else {}
    return json.dumps({"scale": config["scale"], **sliced, **shared, **tables_and_figures, **rules}, sort_keys=True)


def report_files(output_id):
    """Exactly the result files a table's or figure's report job reads (workflow_scripts/report/inputs.py)."""
    return [str(path) for path in declared_files(config, output_id, "results")]


def report_inputs(output_id):
    """A table's or figure's result files, plus the paper's published values (and notes on them) where it has numbers."""
    inputs = {"files": report_files(output_id)}
    if output_id in config["tables"]:
        for name, path in (("reference", f"reference/{output_id}.csv"), ("reference_notes", f"reference/{output_id}.notes.md")):
            if Path(workflow.basedir, path).is_file():
                inputs[name] = path
    return inputs


def output_files(output_id):
    if output_id in config["tables"]:
        return [layout.rule_path("table", f".{ext}", table=output_id) for ext in ("csv", "md", "tex")]
    return [layout.rule_path("figure", f".{ext}", figure=output_id) for ext in ("csv", "png", "pdf")]


def all_targets():
    return [layout.rule_path("provenance", ".json", output=output) for output in sorted(OUTPUTS)]
