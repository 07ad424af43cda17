# Post-training per (model, corpus, condition, seed): the local backend (transformers, CPU) or the
# cluster backend (Megatron-Bridge on training.parallelism.nodes x gpus_per_node GPUs through SLURM).
# Both end in the same hook-free HF checkpoint under results/checkpoints/, which probes and
# evaluations read.


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
        condition=alternatives(config["conditions"] if TRAINING_BACKEND == "hf" else []),
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
    envmodules:
        "rpb/train",
    threads: 1
    shell:
        "OMP_NUM_THREADS={threads} python -m workflow_scripts train run --base {input.base:q} --split {input.split:q}"
        " --architecture {params.architecture} --condition {params.condition:q} --training {params.training:q}"
        " --seed {wildcards.seed} {params.prior} --bias-in-gate-weights {params.bias_in_gate_weights} --out {output.checkpoint:q} --log {output.log:q}"
        " --provenance {output.provenance:q} > {log:q} 2>&1"


# Cluster backend. The base is imported to Megatron format once per model; each split becomes
# Bridge's chat dataset once per corpus.


rule megatron_import:
    input:
        base="results/models/{model}/base",
    output:
        megatron=directory("results/megatron/{model}/base"),
        provenance="results/megatron/{model}/base.provenance.json",
    wildcard_constraints:
        model=alternatives(config["models"] if TRAINING_BACKEND == "megatron" else []),
    log:
        "logs/megatron/import/{model}.log",
    conda:
        MEGATRON_CONDA
    envmodules:
        "rpb/megatron",
    container: MEGATRON_CONTAINER
    shell:
        "python -m workflow_scripts train megatron-import --hf-base {input.base:q} --out {output.megatron:q}"
        " --provenance {output.provenance:q} > {log:q} 2>&1"


rule chat_dataset:
    input:
        split="results/data/{corpus}/train.parquet",
    output:
        dataset=directory("results/megatron/datasets/{corpus}"),
    log:
        "logs/megatron/datasets/{corpus}.log",
    conda:
        MEGATRON_CONDA
    envmodules:
        "rpb/megatron",
    container: MEGATRON_CONTAINER
    shell:
        "python -m workflow_scripts train chat-dataset --split {input.split:q} --out {output.dataset:q} > {log:q} 2>&1"


# One job holds the whole allocation: `srun` starts one torchrun per node (c10d rendezvous on the
# first node); a rerun of a killed, preempted or requeued job resumes from the newest complete
# checkpoint in results/megatron/work/..., which is not a declared output and so survives failures.
rule train_megatron:
    input:
        unpack(condition_prior),
        hf_base="results/models/{model}/base",
        megatron_base="results/megatron/{model}/base",
        dataset="results/megatron/datasets/{corpus}",
        split="results/data/{corpus}/train.parquet",
    output:
        megatron=directory("results/megatron/trained/{model}/{corpus}/{condition}/s{seed}"),
        record="results/megatron/trained/{model}/{corpus}/{condition}/s{seed}.record.json",
        provenance="results/megatron/trained/{model}/{corpus}/{condition}/s{seed}.provenance.json",
    wildcard_constraints:
        condition=alternatives(config["conditions"] if TRAINING_BACKEND == "megatron" else []),
    params:
        condition=lambda w: json.dumps(config["conditions"][w.condition], sort_keys=True),
        training=json.dumps(config["training"], sort_keys=True),
        prior=prior_arguments,
        bias_in_gate_weights=str(config["prior"]["bias_in_gate_weights"]).lower(),
        moe_layers=lambda w: config["models"][w.model]["moe_layers"],
        work="results/megatron/work/{model}/{corpus}/{condition}/s{seed}",
        nodes=PARALLELISM["nodes"],
        gpus=PARALLELISM["gpus_per_node"],
    resources:
        **MEGATRON_ALLOCATION,
    log:
        "logs/megatron/train/{model}/{corpus}/{condition}/s{seed}.log",
    conda:
        MEGATRON_CONDA
    envmodules:
        "rpb/megatron",
    container: MEGATRON_CONTAINER
    shell:
        "python -m workflow_scripts train megatron-launch --nodes {params.nodes} --gpus-per-node {params.gpus}"
        " --launcher {resources.mpi} -- train megatron --hf-base {input.hf_base:q} --megatron-base {input.megatron_base:q}"
        " --dataset {input.dataset:q} --split {input.split:q} --condition {params.condition:q} --training {params.training:q}"
        " --seed {wildcards.seed} {params.prior} --bias-in-gate-weights {params.bias_in_gate_weights}"
        " --moe-layers {params.moe_layers} --work {params.work:q} --out {output.megatron:q} --record {output.record:q}"
        " --provenance {output.provenance:q} > {log:q} 2>&1"


# The training rule's allocation and launch line with a rendezvous report instead of training:
# `snakemake --profile slurm results/megatron/launch_check.txt` before spending GPU-days.
rule megatron_launch_check:
    output:
        report="results/megatron/launch_check.txt",
    params:
        nodes=PARALLELISM["nodes"],
        gpus=PARALLELISM["gpus_per_node"],
    resources:
        **MEGATRON_ALLOCATION,
    log:
        "logs/megatron/launch_check.log",
    conda:
        MEGATRON_CONDA
    envmodules:
        "rpb/megatron",
    container: MEGATRON_CONTAINER
    shell:
        "python -m workflow_scripts train megatron-launch --nodes {params.nodes} --gpus-per-node {params.gpus}"
        " --launcher {resources.mpi} -- train megatron-rendezvous --out {output.report:q} > {log:q} 2>&1"


rule export_megatron:
    input:
        hf_base="results/models/{model}/base",
        megatron="results/megatron/trained/{model}/{corpus}/{condition}/s{seed}",
        record="results/megatron/trained/{model}/{corpus}/{condition}/s{seed}.record.json",
    output:
        checkpoint=directory("results/checkpoints/{model}/{corpus}/{condition}/s{seed}"),
        provenance="results/checkpoints/{model}/{corpus}/{condition}/s{seed}.provenance.json",
    wildcard_constraints:
        condition=alternatives(config["conditions"] if TRAINING_BACKEND == "megatron" else []),
    log:
        "logs/megatron/export/{model}/{corpus}/{condition}/s{seed}.log",
    conda:
        MEGATRON_CONDA
    envmodules:
        "rpb/megatron",
    container: MEGATRON_CONTAINER
    shell:
        "python -m workflow_scripts train megatron-export --hf-base {input.hf_base:q} --megatron {input.megatron:q}"
        " --out {output.checkpoint:q} --provenance {output.provenance:q} > {log:q} 2>&1"
