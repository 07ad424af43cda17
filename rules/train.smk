# Post-training per (model, corpus, condition, seed) with the local backend (transformers, CPU).


rule train_local:
    input:
        unpack(condition_prior),
        base="results/models/{model}/base",
        split="results/data/{corpus}/train.parquet",
    output:
        checkpoint=directory("results/checkpoints/{model}/{corpus}/{condition}/s{seed}"),
        log="results/checkpoints/{model}/{corpus}/{condition}/s{seed}.log.jsonl",
        provenance="results/checkpoints/{model}/{corpus}/{condition}/s{seed}.provenance.json",
    wildcard_constraints:
        condition=alternatives(config["conditions"] if TRAINS_LOCALLY else []),
    params:
        architecture=lambda w: config["models"][w.model]["architecture"],
        condition=lambda w: json.dumps(config["conditions"][w.condition], sort_keys=True),
        training=json.dumps(config["training"], sort_keys=True),
        prior=prior_arguments,
        bias_in_gate_weights=str(config["prior"]["bias_in_gate_weights"]).lower(),
    log:
        "logs/train/{model}/{corpus}/{condition}/s{seed}.log",
    conda:
        "../envs/train.yaml"
    threads: 1
    shell:
        "OMP_NUM_THREADS={threads} python -m workflow_scripts train run --base {input.base:q} --split {input.split:q}"
        " --architecture {params.architecture} --condition {params.condition:q} --training {params.training:q}"
        " --seed {wildcards.seed} {params.prior} --bias-in-gate-weights {params.bias_in_gate_weights} --out {output.checkpoint:q} --log {output.log:q}"
        " --provenance {output.provenance:q} > {log:q} 2>&1"
