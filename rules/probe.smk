# Bias-free probes, co-activation graphs and communities, shuffled priors (§2, §5.2, B, E, F.8-F.10).


rule probe_routes:
    input:
        checkpoint=probed_checkpoint,
        pool=layout.rule_path("corpus", name=layout.POOL_FILE),
    output:
        routes=layout.rule_path("probe", name=layout.ROUTES_FILE),
        meta=layout.rule_path("probe", name=layout.ROUTES_META),
        provenance=layout.rule_path("probe", name=layout.PROVENANCE_FILE),
    wildcard_constraints:
        run=PROBED_RUN,
    params:
        tokens=lambda w: config["corpora"][w.corpus]["probe_tokens"],
        max_length=config["training"]["sequence_length"],
    log:
        "logs/probe/routes/{model}/{corpus}/{run}.log",
    conda:
        "../envs/train.yaml"
    envmodules:
        "rpb/train",
    cache: True  # deterministic and expensive: reusable between workflows (--cache)
    threads: 1
    shell:
        "OMP_NUM_THREADS={threads} python -m workflow_scripts probe routes --checkpoint {input.checkpoint:q}"
        " --pool {input.pool:q} --tokens {params.tokens} --max-length {params.max_length}"
        " --routes {output.routes:q} --meta {output.meta:q} --provenance {output.provenance:q} > {log:q} 2>&1"


rule base_partition:
    input:
        routes=layout.rule_path("probe", run=registry.BASE, name=layout.ROUTES_FILE),
    output:
        partition=layout.rule_path("graph", run=registry.BASE, name=layout.PARTITION_FILE),
        provenance=layout.rule_path("graph", run=registry.BASE, name=layout.PROVENANCE_FILE),
    params:
        detector=DETECTOR,
    log:
        "logs/graphs/partition/{model}/{corpus}.log",
    conda:
        "../envs/analysis.yaml"
    envmodules:
        "rpb/analysis",
    shell:
        "python -m workflow_scripts probe partition --routes {input.routes:q} --detector {params.detector:q}"
        " --out {output.partition:q} --provenance {output.provenance:q} > {log:q} 2>&1"


rule retention:
    input:
        routes=layout.rule_path("probe", name=layout.ROUTES_FILE),
        base_routes=layout.rule_path("probe", run=registry.BASE, name=layout.ROUTES_FILE),
        partition=layout.rule_path("graph", run=registry.BASE, name=layout.PARTITION_FILE),
    output:
        metrics=layout.rule_path("graph", name=layout.METRICS_FILE),
        layers=layout.rule_path("graph", name=layout.LAYERS_FILE),
        provenance=layout.rule_path("graph", name=layout.PROVENANCE_FILE),
    wildcard_constraints:
        run=COMPARED_RUN,
    params:
        detector=DETECTOR,
        probe=RETENTION_PROBE,
    log:
        "logs/graphs/retention/{model}/{corpus}/{run}.log",
    conda:
        "../envs/analysis.yaml"
    envmodules:
        "rpb/analysis",
    shell:
        "python -m workflow_scripts probe retention --routes {input.routes:q} --base-routes {input.base_routes:q}"
        " --partition {input.partition:q} --detector {params.detector:q} --probe {params.probe:q}"
        " --out {output.metrics:q} --layers {output.layers:q} --provenance {output.provenance:q} > {log:q} 2>&1"


rule shuffled_priors:
    input:
        prior=layout.rule_path("prior", name=layout.PRIOR_FILES["base"]),
        partition=layout.rule_path("graph", run=registry.BASE, name=layout.PARTITION_FILE),
    output:
        within=layout.rule_path("prior", name=layout.PRIOR_FILES["shuffled_within"]),
        shuffled_global=layout.rule_path("prior", name=layout.PRIOR_FILES["shuffled_global"]),
        validation=layout.rule_path("prior", name=layout.PRIOR_VALIDATION),
        provenance=layout.rule_path("prior", name=layout.SHUFFLE_PROVENANCE),
    params:
        top_k=lambda w: config["models"][w.model]["top_k"],
        seed=config["probe"]["shuffle_seeds"][0],
        seeds=" ".join(map(str, config["probe"]["shuffle_seeds"])),
        rhos=" ".join(map(str, config["probe"]["edge_fraction_sweep"])),
        clip_eps=config["prior"]["clip_eps"],
        clip_c=config["prior"]["clip_c"],
    log:
        "logs/priors/shuffle/{model}/{corpus}.log",
    conda:
        "../envs/train.yaml"
    envmodules:
        "rpb/train",
    shell:
        "python -m workflow_scripts priors shuffle --prior {input.prior:q} --partition {input.partition:q}"
        " --top-k {params.top_k} --seed {params.seed} --validation-seeds {params.seeds} --rhos {params.rhos}"
        " --clip-eps {params.clip_eps} --clip-c {params.clip_c} --within {output.within:q}"
        " --global {output.shuffled_global:q} --validation {output.validation:q}"
        " --provenance {output.provenance:q} > {log:q} 2>&1"
