# Post-training per (model, corpus, condition, seed): the local backend (transformers, CPU) or the
# cluster backend (Megatron-Bridge on training.parallelism.nodes x gpus_per_node GPUs through SLURM).
# Both end in the same hook-free HF checkpoint under results/checkpoints/, which probes and
# evaluations read.


rule train_local:
    input:
        unpack(condition_prior),
        base=layout.rule_path("model", name=layout.BASE_MODEL),
        split=layout.rule_path("corpus", name=layout.SPLIT_FILE),
    output:
        checkpoint=gpu_days(directory(layout.rule_path("checkpoint"))),
        log=layout.rule_path("checkpoint", ".log.jsonl"),
        provenance=layout.rule_path("checkpoint", ".provenance.json"),
    wildcard_constraints:
        condition=alternatives(config["conditions"] if TRAINING_BACKEND == "hf" else []),
    params:
        architecture=lambda w: config["models"][w.model]["architecture"],
        condition=condition_slice,
        training=LOCAL_TRAINING,
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
        base=layout.rule_path("model", name=layout.BASE_MODEL),
    output:
        megatron=directory(layout.rule_path("megatron_base")),
        provenance=layout.rule_path("megatron_base", ".provenance.json"),
    wildcard_constraints:
        model=alternatives(config["models"] if TRAINING_BACKEND == "megatron" else []),
    log:
        "logs/megatron/import/{model}.log",
    conda:
        MEGATRON_CONDA
    envmodules:
        *MEGATRON_MODULES,
    cache: True  # deterministic and expensive: reusable between workflows (--cache)
    container: MEGATRON_CONTAINER
    shell:
        "python -m workflow_scripts train megatron-import --hf-base {input.base:q} --out {output.megatron:q}"
        " --provenance {output.provenance:q} > {log:q} 2>&1"


rule chat_dataset:
    input:
        split=layout.rule_path("corpus", name=layout.SPLIT_FILE),
    output:
        dataset=directory(layout.rule_path("megatron_dataset")),
    log:
        "logs/megatron/datasets/{corpus}.log",
    conda:
        MEGATRON_CONDA
    envmodules:
        *MEGATRON_MODULES,
    container: MEGATRON_CONTAINER
    shell:
        "python -m workflow_scripts train chat-dataset --split {input.split:q} --out {output.dataset:q} > {log:q} 2>&1"


# Before the launch, one process checks and hashes the run's inputs (tens of GB at paper scale) and
# binds the work folder results/megatron/work/... to the run's settings and inputs, so that no rank
# hashes while the others wait in the process group, and no rank resumes another run's weights.
rule megatron_claim:
    input:
        unpack(condition_prior),
        hf_base=layout.rule_path("model", name=layout.BASE_MODEL),
        megatron_base=layout.rule_path("megatron_base"),
        dataset=layout.rule_path("megatron_dataset"),
        split=layout.rule_path("corpus", name=layout.SPLIT_FILE),
    output:
        claim=layout.rule_path("megatron_trained", ".claim.json"),
    wildcard_constraints:
        condition=alternatives(config["conditions"] if TRAINING_BACKEND == "megatron" else []),
    params:
        run=megatron_run,
    log:
        "logs/megatron/claim/{model}/{corpus}/{condition}/s{seed}.log",
    conda:
        MEGATRON_CONDA
    envmodules:
        *MEGATRON_MODULES,
    container: MEGATRON_CONTAINER
    shell:
        "python -m workflow_scripts train megatron-claim {params.run} --out {output.claim:q} > {log:q} 2>&1"


# One job holds the whole allocation: `srun` starts one torchrun per node (c10d rendezvous on the
# first node); a rerun of a killed, preempted or requeued job resumes from the newest complete
# checkpoint in the claimed work folder, which is not a declared output and so survives failures.
# No container directive: the launch runs on the host, where srun is, and enters the image per
# rank (MEGATRON_LAUNCH_IMAGE).
rule train_megatron:
    input:
        unpack(condition_prior),
        claim=layout.rule_path("megatron_trained", ".claim.json"),
        hf_base=layout.rule_path("model", name=layout.BASE_MODEL),
        megatron_base=layout.rule_path("megatron_base"),
        dataset=layout.rule_path("megatron_dataset"),
        split=layout.rule_path("corpus", name=layout.SPLIT_FILE),
    output:
        megatron=gpu_days(directory(layout.rule_path("megatron_trained"))),
        record=layout.rule_path("megatron_trained", ".record.json"),
        provenance=layout.rule_path("megatron_trained", ".provenance.json"),
    wildcard_constraints:
        condition=alternatives(config["conditions"] if TRAINING_BACKEND == "megatron" else []),
    params:
        moe_layers=lambda w: config["models"][w.model]["moe_layers"],
        run=megatron_run,
        nodes=PARALLELISM["nodes"],
        gpus=PARALLELISM["gpus_per_node"],
        image=MEGATRON_LAUNCH_IMAGE,
    resources:
        **MEGATRON_ALLOCATION,
    log:
        "logs/megatron/train/{model}/{corpus}/{condition}/s{seed}.log",
    conda:
        MEGATRON_CONDA
    envmodules:
        *MEGATRON_MODULES,
    shell:
        "python -m workflow_scripts train megatron-launch --nodes {params.nodes} --gpus-per-node {params.gpus}"
        " --launcher srun{params.image} -- train megatron {params.run} --moe-layers {params.moe_layers}"
        " --out {output.megatron:q} --record {output.record:q} --provenance {output.provenance:q} > {log:q} 2>&1"


# The training rule's allocation and launch line (container included) with a rendezvous report
# instead of training: `snakemake --profile slurm results/megatron/launch_check.txt` before
# spending GPU-days. The report lists every rank's node, CPUs and container.
rule megatron_launch_check:
    output:
        report=layout.rule_path("megatron_check"),
    params:
        nodes=PARALLELISM["nodes"],
        gpus=PARALLELISM["gpus_per_node"],
        image=MEGATRON_LAUNCH_IMAGE,
    resources:
        **MEGATRON_ALLOCATION,
    log:
        "logs/megatron/launch_check.log",
    conda:
        MEGATRON_CONDA
    envmodules:
        *MEGATRON_MODULES,
    shell:
        "python -m workflow_scripts train megatron-launch --nodes {params.nodes} --gpus-per-node {params.gpus}"
        " --launcher srun{params.image} -- train megatron-rendezvous --out {output.report:q} > {log:q} 2>&1"


rule export_megatron:
    input:
        hf_base=layout.rule_path("model", name=layout.BASE_MODEL),
        megatron=layout.rule_path("megatron_trained"),
        record=layout.rule_path("megatron_trained", ".record.json"),
    output:
        checkpoint=gpu_days(directory(layout.rule_path("checkpoint"))),
        provenance=layout.rule_path("checkpoint", ".provenance.json"),
    wildcard_constraints:
        condition=alternatives(config["conditions"] if TRAINING_BACKEND == "megatron" else []),
    log:
        "logs/megatron/export/{model}/{corpus}/{condition}/s{seed}.log",
    conda:
        MEGATRON_CONDA
    envmodules:
        *MEGATRON_MODULES,
    container: MEGATRON_CONTAINER
    shell:
        "python -m workflow_scripts train megatron-export --hf-base {input.hf_base:q} --megatron {input.megatron:q}"
        " --out {output.checkpoint:q} --provenance {output.provenance:q} > {log:q} 2>&1"
