# Registry loading, wildcard constraints, input functions and target lists. The helpers the rules
# call are in workflow_scripts/dag_inputs.py; this file binds them to the loaded registry.
import json
import shlex
from pathlib import Path

from snakemake.exceptions import WorkflowError

from workflow_scripts import dag_inputs, forkserver, hub, layout, registry
from workflow_scripts.dag_inputs import TRAINING_KEYS, alternatives, config_slice
from workflow_scripts.errors import UserInputError

# The registry, loaded one way (registry.load_config): config.yaml, then the files Snakemake was
# given (--configfile, a profile's configfiles), in precedence order, then --config; duplicate
# keys refused, validated, seeds capped. It replaces Snakemake's merge of the same files, so all
# rules read the validated registry. The Snakefile has no configfile directive: Snakemake's loader
# would parse config.yaml once more (a tenth of a dry run's start-up) and name neither file nor
# line of an error. config.yaml is listed where the directive lists it (the HTML report shows it).
workflow.configfiles.insert(0, registry.CONFIG_FILE)
CONFIG_FILES = dag_inputs.config_files(workflow.configfiles, workflow.overwrite_configfiles, Path.cwd())
config.update(registry.load_config(CONFIG_FILES, workflow.config_settings.config))

# Every job imports this checkout's workflow_scripts, whichever environment runs it (a conda env,
# a stage module's venv, the Megatron image): environments hold dependencies only, never a copy of
# the code that could go stale against the commit provenance records.
shell.prefix(f"set -euo pipefail; export PYTHONPATH={shlex.quote(workflow.basedir)}${{{{PYTHONPATH:+:$PYTHONPATH}}}}; ")


# A SLURM run first checks its profile's account, partitions and GPUs, its hub repositories and
# revisions, and its disk (workflow_scripts/preflight), and stops before its first sbatch when one
# fails (--no-hooks skips it). A hook, not a job: running again at every start, it never makes a
# downstream job out of date. Local runs may keep torch imported between jobs (forkserver.py).
onstart:
    if workflow.executor_plugin.name == "slurm":
        import sys

        from snakemake.logging import logger

        from workflow_scripts.preflight.cli import before_slurm_run

        jobs = [(job.rule.name, dict(job.wildcards.items())) for job in workflow.dag.jobs]
        targets = [rule.name for rule in workflow.dag.targetrules]
        if stop := before_slurm_run(
            config, CONFIG_FILES, workflow.dag.targetfiles, targets, jobs, HUB_LOCK, sys.argv, logger.info
        ):
            raise WorkflowError(stop)
    if config["fork_server"] and workflow.local_exec:  # never for jobs a cluster executor submits
        forkserver.start("logs/forkserver.log")


onsuccess:
    forkserver.stop()


onerror:
    forkserver.stop()


# The commits of config.yaml's hub refs, resolved once by `python -m workflow_scripts lock` before the
# first download: the download rules pass them (hub_revision), so a job's params are the same commit
# whether config.yaml names `main` or that commit. No file yet: every ref stays as written, which a
# dry run plans and a download refuses.
try:
    HUB_LOCK = hub.read_lock(hub.LOCK_FILE)
except UserInputError as error:
    raise WorkflowError(str(error)) from None

if refusal := dag_inputs.cache_refusal(config, workflow.workflow_settings.cache, HUB_LOCK):
    raise WorkflowError(refusal)


def gpu_days(path):
    """A trained checkpoint or a generation: write-protected once written where ``protect_outputs``."""
    return protected(path) if config["protect_outputs"] else path


OUTPUTS = registry.outputs(config)

# The training backend: hf (local, toy scale) or megatron (cluster, paper scale); both have rules,
# so every table and figure is a target at both scales.
TRAINING_BACKEND = config["training"]["backend"]
PARALLELISM = config["training"]["parallelism"]
# The SLURM request of one Megatron run (training and its launch check share it), covering all
# nodes of training.parallelism with one task per node. Several nodes: an MPI job, which the
# executor leaves unwrapped, so the launch's own srun starts one torchrun per node (a step inside
# the plugin's one-task step would get one node: "Only allocated 1 nodes asked for 2"). One node:
# the plugin refuses an MPI job of one task and runs the job in its own step with the job's CPUs
# and GPUs, where the launch starts torchrun standalone (train/megatron/launch.py).
MEGATRON_ALLOCATION = dict(
    nodes=PARALLELISM["nodes"],
    tasks=PARALLELISM["nodes"],
    gres=f"gpu:{PARALLELISM['gpus_per_node']}",
    tasks_per_gpu=0,
    slurm_extra="--ntasks-per-node=1 --exclusive",
    **({"mpi": "srun"} if PARALLELISM["nodes"] > 1 else {}),
)
# The Megatron rules run in an apptainer image (training.container) or, without one, in their conda env.
MEGATRON_CONTAINER = config["training"]["container"]
MEGATRON_CONDA = None if MEGATRON_CONTAINER else "../envs/megatron.yaml"
MEGATRON_MODULES = [] if MEGATRON_CONTAINER else ["rpb/megatron"]
# The image has no SLURM, so the two launch rules are not wrapped in it (no container directive):
# the launch runs `srun ... apptainer exec --nv <image> torchrun ...` (train/megatron/launch.py).
MEGATRON_LAUNCH_IMAGE = f" --container {shlex.quote(MEGATRON_CONTAINER)}" if MEGATRON_CONTAINER else ""
# A trained run (condition, seed), and a user's own checkpoint (own_checkpoints; none: matches nothing).
TRAINED_RUN = rf"(?:{alternatives(config['conditions'])})/s\d+"
OWN_RUN = rf"{registry.OWN}/(?:{alternatives(config.get('own_checkpoints', {}))})"
# A run compared with its base's routing: a trained one or an own checkpoint.
COMPARED_RUN = rf"{TRAINED_RUN}|{OWN_RUN}"
# A probed run is the base model, a trained run or an own checkpoint.
PROBED_RUN = rf"base|{COMPARED_RUN}"
# An evaluated checkpoint is the base model or an own checkpoint (once, not per corpus), or one
# trained (corpus, condition, seed).
EVALUATED = rf"base|{OWN_RUN}|(?:{alternatives(config['corpora'])})/{TRAINED_RUN}"
BENCHMARK_ITEMS = expand(layout.rule_path("benchmark", name=layout.ITEMS_FILE), benchmark=sorted(config["benchmarks"]))
BENCHMARK_SUITE = layout.rule_path("suite", name=layout.SUITE_FILE)  # the evaluations' one items input

# The config slices the commands read (dag_inputs: the keys, and the builder that parses each).
SAMPLING = config_slice(config["evaluation"], dag_inputs.SAMPLING_KEYS)
LOCAL_TRAINING = config_slice(config["training"], ("backend", *TRAINING_KEYS))
RETENTION_PROBE = config_slice(config["probe"], dag_inputs.RETENTION_KEYS)
GENERATE_OPTIONS = dag_inputs.generate_options(config["evaluation"])
SANDBOX_LIMITS = dag_inputs.sandbox_limits(config["evaluation"])
DETECTOR = dag_inputs.detector(config)


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
    return alternatives(ids if kind == ("toy" if config["scale"] == "toy" else "hub") else [])


def hub_revision(section):
    """The commit a download rule of ``section`` passes for its wildcard's entry (config, else lock)."""
    wildcard = {"datasets": "dataset", "models": "model", "benchmarks": "benchmark"}[section]
    return lambda wildcards: dag_inputs.hub_revision(config, HUB_LOCK, section, wildcards[wildcard])


def hub_option(section, path, flag):
    """``{flag} VALUE`` for the download of each ``section`` entry that sets the key ``path`` (a key
    under its ``hub``: the rehearsal's cut bases and first rows), as a param named ``option``; no
    param where no entry sets it.

    At paper scale none does, and a new param, even an empty one, would change every download's
    params and rerun all that follows.
    """
    wildcard = {"datasets": "dataset", "models": "model"}[section]
    holder, key = path
    values = {name: entry[holder][key] for name, entry in config[section].items() if key in entry[holder]}
    if not values:
        return {}
    return {"option": lambda w: f"{flag} {values[w[wildcard]]}" if w[wildcard] in values else ""}


def raw_file(wildcards):
    corpus = config["corpora"][wildcards.corpus]
    return layout.rule_path("raw", ".parquet", dataset=corpus["dataset"], subset=corpus["subset"])


def corpus_spec(wildcards):
    return dag_inputs.corpus_spec(config, wildcards.corpus)


def toy_model_spec(wildcards):
    """The toy sizes plus the registry's E, k, shared experts and MoE layers, as JSON."""
    return json.dumps(registry.toy_model_sizes(config["models"][wildcards.model]), sort_keys=True)


def toy_pretraining(wildcards):
    return dag_inputs.toy_pretraining(config, wildcards.model)


def condition_slice(wildcards):
    return dag_inputs.condition_slice(config, wildcards.condition)


def probed_checkpoint(wildcards):
    return dag_inputs.probed_checkpoint(config, wildcards.model, wildcards.corpus, wildcards.run)


def evaluated_checkpoint(wildcards):
    return dag_inputs.checkpoint_of(config, wildcards.model, wildcards.evaluated)


def evaluated_identity(wildcards):
    return dag_inputs.evaluated_identity(config, wildcards.model, wildcards.evaluated)


def condition_prior(wildcards):
    return dag_inputs.condition_prior(config, wildcards.model, wildcards.corpus, wildcards.condition)


def prior_arguments(wildcards, input):
    return dag_inputs.prior_arguments(dict(input.items()))


def megatron_run(wildcards, input):
    return dag_inputs.training_arguments(config, dict(wildcards.items()), dict(input.items()))


def closure_inputs(output_id):
    return dag_inputs.closure_inputs(config, output_id)


def report_config(output_id):
    return dag_inputs.report_config(config, output_id)


def report_inputs(output_id):
    return dag_inputs.report_inputs(config, output_id, Path(workflow.basedir))


def reference_arguments(wildcards, input):
    return dag_inputs.reference_arguments(dict(input.items()))


def output_files(output_id):
    return dag_inputs.output_files(config, output_id)


def results_root(wildcards):
    """The results root a report job reads below (a function: its files are inputs, not a prefix)."""
    return layout.RESULTS


def all_targets():
    return dag_inputs.all_targets(config)


# The rehearsal overlay's default target (profiles/rehearsal); None under any other config.
REHEARSAL_TARGETS = dag_inputs.rehearsal_targets(config) if registry.REHEARSAL in config else None
