# Frozen-base Q/A priors over each training split (eq. 2, F.7).


rule prior:
    input:
        model=layout.rule_path("model", name=layout.BASE_MODEL),
        split=layout.rule_path("corpus", name=layout.SPLIT_FILE),
    output:
        prior=layout.rule_path("prior", name=layout.PRIOR_FILES["base"]),
        meta=layout.rule_path("prior", name=layout.PRIOR_META),
        stats=layout.rule_path("prior", name=layout.PRIOR_STATS),
        provenance=layout.rule_path("prior", name=layout.PROVENANCE_FILE),
    params:
        batch_size=config["prior"]["batch_size"],
        max_length=config["training"]["sequence_length"],
        clip_eps=config["prior"]["clip_eps"],
        clip_c=config["prior"]["clip_c"],
    log:
        "logs/priors/{model}/{corpus}.log",
    conda:
        "../envs/train.yaml"
    envmodules:
        "rpb/train",
    cache: True  # deterministic and expensive: reusable between workflows (--cache)
    threads: 2
    shell:
        "OMP_NUM_THREADS={threads} python -m workflow_scripts priors compute --model {input.model:q} --split {input.split:q}"
        " --prior {output.prior:q} --meta {output.meta:q} --stats {output.stats:q}"
        " --batch-size {params.batch_size} --max-length {params.max_length}"
        " --clip-eps {params.clip_eps} --clip-c {params.clip_c} --provenance {output.provenance:q} > {log:q} 2>&1"
