# Bias-free probes, co-activation graphs and communities, shuffled priors (§2, §5.2, B, E, F.8-F.10).


rule probe_routes:
    input:
        checkpoint=probed_checkpoint,
        pool="results/data/{corpus}/probe.parquet",
    output:
        routes="results/probes/{model}/{corpus}/{run}/routes.npz",
        meta="results/probes/{model}/{corpus}/{run}/meta.json",
        provenance="results/probes/{model}/{corpus}/{run}/provenance.json",
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
    threads: 1
    shell:
        "OMP_NUM_THREADS={threads} python -m workflow_scripts probe routes --checkpoint {input.checkpoint:q}"
        " --pool {input.pool:q} --tokens {params.tokens} --max-length {params.max_length}"
        " --routes {output.routes:q} --meta {output.meta:q} --provenance {output.provenance:q} > {log:q} 2>&1"


rule base_partition:
    input:
        routes="results/probes/{model}/{corpus}/base/routes.npz",
    output:
        partition="results/graphs/{model}/{corpus}/base/partition.json",
        provenance="results/graphs/{model}/{corpus}/base/provenance.json",
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
        routes="results/probes/{model}/{corpus}/{condition}/s{seed}/routes.npz",
        base_routes="results/probes/{model}/{corpus}/base/routes.npz",
        partition="results/graphs/{model}/{corpus}/base/partition.json",
    output:
        metrics="results/graphs/{model}/{corpus}/{condition}/s{seed}/metrics.json",
        layers="results/graphs/{model}/{corpus}/{condition}/s{seed}/layers.parquet",
        provenance="results/graphs/{model}/{corpus}/{condition}/s{seed}/provenance.json",
    params:
        detector=DETECTOR,
        probe=json.dumps(config["probe"], sort_keys=True),
    log:
        "logs/graphs/retention/{model}/{corpus}/{condition}/s{seed}.log",
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
        prior="results/priors/{model}/{corpus}/prior.npy",
        partition="results/graphs/{model}/{corpus}/base/partition.json",
    output:
        within="results/priors/{model}/{corpus}/shuffled-within.npy",
        shuffled_global="results/priors/{model}/{corpus}/shuffled-global.npy",
        validation="results/priors/{model}/{corpus}/prior_validation.json",
        provenance="results/priors/{model}/{corpus}/shuffle-provenance.json",
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
