# Registry loading, wildcard constraints, input functions and target lists.
import json
import sys

sys.path.insert(0, workflow.basedir)

from workflow_scripts import registry

registry.validate_config(config, f"{workflow.basedir}/workflow_scripts/schemas/config.schema.yaml")

OUTPUTS = registry.outputs(config)
NEVER = "(?!x)x"  # a wildcard pattern nothing matches: the rule does not apply at this scale


def alternatives(values):
    """Regex alternation of registry ids, for wildcard constraints."""
    return "|".join(sorted(values)) or NEVER


# Conditions trainable now: their prior (if any) is one a present stage produces.
# The shuffled priors come with the probing stage.
PRIOR_KINDS_PRESENT = {"base"}
TRAINABLE = [
    name
    for name, condition in config["conditions"].items()
    if condition.get("prior", "base") in PRIOR_KINDS_PRESENT
]
# Training backends with a rule; the cluster (megatron) backend lands separately.
TRAINING_BACKENDS_PRESENT = {"hf"}


wildcard_constraints:
    corpus=alternatives(config["corpora"]),
    dataset=alternatives(config["datasets"]),
    model=alternatives(config["models"]),
    condition=alternatives(TRAINABLE),
    seed=r"\d+",
    output=alternatives(OUTPUTS),


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
    model = config["models"][wildcards.model]
    spec = dict(model["toy"])
    spec["num_layers"] = spec["first_dense_layers"] + model["moe_layers"]
    spec["num_experts"] = model["experts"]
    spec["top_k"] = model["top_k"]
    spec["shared_experts"] = model["shared_experts"]
    return json.dumps(spec, sort_keys=True)


def prior_files(model, corpus):
    base = f"results/priors/{model}/{corpus}"
    return {"prior": f"{base}/prior.npy", "meta": f"{base}/meta.json", "stats": f"{base}/stats.json"}


def checkpoint_dir(training):
    return f"results/checkpoints/{training.model}/{training.corpus}/{training.condition}/s{training.seed}"


def closure_inputs(output_id):
    """Files of the stages that exist, for everything one table or figure needs."""
    closure = registry.closure(config, output_id)
    files = [path for corpus in sorted(closure.corpora) for path in corpus_files(corpus).values()]
    priors = sorted((p.model, p.corpus) for p in closure.priors if p.kind in PRIOR_KINDS_PRESENT)
    files += [path for model, corpus in priors for path in prior_files(model, corpus).values()]
    if config["training"]["backend"] in TRAINING_BACKENDS_PRESENT:
        trainings = [t for t in closure.trainings if t.condition in TRAINABLE]
        files += sorted(checkpoint_dir(t) for t in trainings)
    return files


def condition_prior(wildcards):
    """The prior files a training reads, or none for conditions without a prior."""
    if "prior" not in config["conditions"][wildcards.condition]:
        return {}
    files = prior_files(wildcards.model, wildcards.corpus)
    return {"prior": files["prior"], "prior_meta": files["meta"]}


def prior_arguments(wildcards, input):
    if "prior" not in input.keys():
        return ""
    return f"--prior {input.prior} --prior-meta {input.prior_meta}"


def all_targets():
    return expand("results/provenance/{output}.json", output=sorted(OUTPUTS))
