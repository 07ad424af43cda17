# Registry loading, wildcard constraints, input functions and target lists.
import json
import shlex
import sys
from pathlib import Path

sys.path.insert(0, workflow.basedir)

from workflow_scripts import forkserver, layout, registry

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
# A probed run is the base model or one trained (condition, seed).
PROBED_RUN = rf"base|(?:{alternatives(config['conditions'])})/s\d+"
# An evaluated run is the base model (once, not per corpus) or one trained (corpus, condition, seed).
EVALUATED_RUN = rf"base|(?:{alternatives(config['corpora'])})/(?:{alternatives(config['conditions'])})/s\d+"
BENCHMARK_ITEMS = expand("results/benchmarks/{benchmark}/items.parquet", benchmark=sorted(config["benchmarks"]))
SAMPLING = {
    key: config["evaluation"][key] for key in ("temperature", "top_p", "max_new_tokens", "repeats", "base_seed")
}
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
    return {
        "train": f"results/data/{corpus}/train.parquet",
        "probe": f"results/data/{corpus}/probe.parquet",
        "report": f"results/data/{corpus}/report.json",
    }


def raw_file(wildcards):
    corpus = config["corpora"][wildcards.corpus]
    return f"results/raw/{corpus['dataset']}/{corpus['subset']}.parquet"


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


def prior_file(model, corpus, kind):
    return str(layout.prior_file("results", model, corpus, layout.PRIOR_FILES[kind]))


def checkpoint_of(model, run):
    """The base model, or the trained checkpoint ``{corpus}/{condition}/s{seed}``."""
    if run == registry.BASE:
        return f"results/models/{model}/base"
    return f"results/checkpoints/{model}/{run}"


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
    """The files of every stage behind one table or figure."""
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
    return files


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


REPORT_CONFIG_KEYS = ("scale", "models", "corpora", "conditions", "benchmarks", "training", "prior", "probe", "evaluation")


def report_config(output_id):
    """The registry slice a table or figure reads: shared sections plus its own entry, as JSON."""
    section = "tables" if output_id in config["tables"] else "figures"
    entry = {"tables": {}, "figures": {}}
    entry[section] = {output_id: config[section][output_id]}
    return json.dumps({**{key: config[key] for key in REPORT_CONFIG_KEYS}, **entry}, sort_keys=True)


def report_inputs(output_id):
    """A table's or figure's closure, plus the paper's published values where the paper has numbers."""
    inputs = {"closure": closure_inputs(output_id)}
    reference = f"reference/{output_id}.csv"
    if output_id in config["tables"] and Path(workflow.basedir, reference).is_file():
        inputs["reference"] = reference
    return inputs


def output_files(output_id):
    if output_id in config["tables"]:
        return expand("results/tables/{table}.{ext}", table=output_id, ext=("csv", "md", "tex"))
    return expand("results/figures/{figure}.{ext}", figure=output_id, ext=("csv", "png", "pdf"))


def all_targets():
    return expand("results/provenance/{output}.json", output=sorted(OUTPUTS))
