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


wildcard_constraints:
    corpus=alternatives(config["corpora"]),
    dataset=alternatives(config["datasets"]),
    output=alternatives(OUTPUTS),


def datasets_sourced_from(kind):
    """Datasets whose raw rows come from the hub (paper scale) or the toy generator (toy scale)."""
    scale_source = "toy" if config["scale"] == "toy" else "hub"
    return alternatives(config["datasets"] if kind == scale_source else [])


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


def closure_inputs(output_id):
    """Files of the stages that exist, for everything one table or figure needs."""
    closure = registry.closure(config, output_id)
    return [path for corpus in sorted(closure.corpora) for path in corpus_files(corpus).values()]


def all_targets():
    return expand("results/provenance/{output}.json", output=sorted(OUTPUTS))
