# Base models: pinned hub checkpoints (paper scale) or briefly pretrained toy models (toy scale).

# Downloads run on the submit host, which has the internet and HF_TOKEN (compute nodes often have
# neither): no SLURM job (docs/paper-scale.md).
localrules:
    download_model,


# Bases cut to their first MoE layers (the rehearsal's) pass --moe-layers; the paper's pass nothing.
MODEL_CUT = hub_option("models", ("hub", "keep_moe_layers"), "--moe-layers")


rule download_model:
    output:
        base=directory(layout.rule_path("model", name=layout.BASE_MODEL)),
        manifest=layout.rule_path("model", name=layout.MANIFEST_FILE),
    wildcard_constraints:
        model=sourced_from("hub", config["models"]),
    params:
        repo=lambda w: config["models"][w.model]["hub"]["repo"],
        revision=hub_revision("models"),
        **MODEL_CUT,
    log:
        "logs/models/download/{model}.log",
    conda:
        "../envs/data.yaml"
    envmodules:
        "rpb/data",
    cache: "omit-software"
    resources:
        runtime=240,
        mem_mb=16000,
    shell:
        "python -m workflow_scripts models download --repo {params.repo:q} --revision {params.revision:q}"
        " --out {output.base:q} --manifest {output.manifest:q}"
        + (" {params.option}" if MODEL_CUT else "")
        + " > {log:q} 2>&1"


rule toy_base_model:
    output:
        base=directory(layout.rule_path("model", name=layout.BASE_MODEL)),
        report=layout.rule_path("model", name=layout.ROUTING_REPORT),
        provenance=layout.rule_path("model", name=layout.PROVENANCE_FILE),
    wildcard_constraints:
        model=sourced_from("toy", config["models"]),
    params:
        architecture=lambda w: config["models"][w.model]["architecture"],
        spec=toy_model_spec,
        pretrain=toy_pretraining,
    log:
        "logs/models/toy/{model}.log",
    conda:
        "../envs/train.yaml"
    envmodules:
        "rpb/train",
    threads: 2
    shell:
        "OMP_NUM_THREADS={threads} python -m workflow_scripts models toy-base --architecture {params.architecture}"
        " --spec {params.spec:q} --pretrain {params.pretrain:q}"
        " --out {output.base:q} --report {output.report:q} --provenance {output.provenance:q} > {log:q} 2>&1"
