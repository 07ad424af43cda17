# Benchmarks -> items; checkpoints -> sampled generations -> graded scores and avg@5 (§4, F.3-F.5).


rule download_benchmark:
    output:
        raw="results/benchmarks/{benchmark}/raw.parquet",
        manifest="results/benchmarks/{benchmark}/manifest.json",
    wildcard_constraints:
        benchmark=sourced_from("hub", config["benchmarks"]),
    params:
        hub=lambda w: config["benchmarks"][w.benchmark]["hub"],
        gated=lambda w: "--gated" if config["benchmarks"][w.benchmark].get("gated") else "",
    log:
        "logs/benchmarks/download/{benchmark}.log",
    conda:
        "../envs/data.yaml"
    envmodules:
        "rpb/data",
    cache: "omit-software"
    resources:
        runtime=60,
        mem_mb=16000,
    shell:
        "python -m workflow_scripts data download --repo {params.hub[repo]:q} --revision {params.hub[revision]:q}"
        " --subset {params.hub[config]:q} --split {params.hub[split]:q} {params.gated}"
        " --out {output.raw:q} --manifest {output.manifest:q} > {log:q} 2>&1"


rule toy_benchmark:
    output:
        raw="results/benchmarks/{benchmark}/raw.parquet",
    wildcard_constraints:
        benchmark=sourced_from("toy", config["benchmarks"]),
    log:
        "logs/benchmarks/toy/{benchmark}.log",
    conda:
        "../envs/eval.yaml"
    envmodules:
        "rpb/eval",
    shell:
        "python -m workflow_scripts evaluate fixture --benchmark {wildcards.benchmark}"
        " --out {output.raw:q} > {log:q} 2>&1"


rule benchmark_items:
    input:
        raw="results/benchmarks/{benchmark}/raw.parquet",
    output:
        benchmark_items="results/benchmarks/{benchmark}/items.parquet",
        provenance="results/benchmarks/{benchmark}/provenance.json",
    params:
        spec=lambda w: json.dumps(config["benchmarks"][w.benchmark], sort_keys=True),
        shuffle_seed=config["evaluation"]["choice_shuffle_seed"],
        limit=(
            f"--limit {config['evaluation']['items_per_benchmark']}"
            if config["evaluation"]["items_per_benchmark"]
            else ""
        ),
    log:
        "logs/benchmarks/items/{benchmark}.log",
    conda:
        "../envs/eval.yaml"
    envmodules:
        "rpb/eval",
    shell:
        "python -m workflow_scripts evaluate items --benchmark {wildcards.benchmark} --raw {input.raw:q}"
        " --spec {params.spec:q} --shuffle-seed {params.shuffle_seed} {params.limit}"
        " --out {output.benchmark_items:q} --provenance {output.provenance:q} > {log:q} 2>&1"


rule generate:
    input:
        checkpoint=evaluated_checkpoint,
        benchmark_items=BENCHMARK_ITEMS,
    output:
        generations="results/evals/{model}/{run}/generations.parquet",
        provenance="results/evals/{model}/{run}/generations.provenance.json",
    wildcard_constraints:
        run=EVALUATED_RUN,
    params:
        sampling=json.dumps(SAMPLING, sort_keys=True),
        backend=config["evaluation"]["backend"],
        batch_size=config["evaluation"]["batch_size"],
        data_parallel=config["evaluation"]["data_parallel"],
        engine=json.dumps(config["evaluation"]["engine"], sort_keys=True),
    log:
        "logs/evals/generate/{model}/{run}.log",
    conda:
        "../envs/eval.yaml"
    envmodules:
        "rpb/eval",
    threads: 1
    shell:
        "OMP_NUM_THREADS={threads} python -m workflow_scripts evaluate generate --checkpoint {input.checkpoint:q}"
        " --items {input.benchmark_items:q} --sampling {params.sampling:q} --backend {params.backend}"
        " --batch-size {params.batch_size} --data-parallel {params.data_parallel} --engine {params.engine:q}"
        " --out {output.generations:q} --provenance {output.provenance:q} > {log:q} 2>&1"


rule score:
    input:
        benchmark_items=BENCHMARK_ITEMS,
        generations="results/evals/{model}/{run}/generations.parquet",
    output:
        scores="results/evals/{model}/{run}/scores.parquet",
        summary="results/evals/{model}/{run}/summary.json",
        provenance="results/evals/{model}/{run}/provenance.json",
    wildcard_constraints:
        run=EVALUATED_RUN,
    params:
        repeats=config["evaluation"]["repeats"],
        limits=SANDBOX_LIMITS,
        workers=config["evaluation"]["grading_workers"],
        math_timeout=config["evaluation"]["math_timeout_seconds"],
        identity=evaluated_run,
    log:
        "logs/evals/score/{model}/{run}.log",
    conda:
        "../envs/eval.yaml"
    envmodules:
        "rpb/eval",
    threads: config["evaluation"]["grading_workers"]
    shell:
        "python -m workflow_scripts evaluate score --items {input.benchmark_items:q} --generations {input.generations:q}"
        " --repeats {params.repeats} --limits {params.limits:q} --workers {params.workers}"
        " --math-timeout {params.math_timeout} --identity {params.identity:q}"
        " --scores {output.scores:q} --summary {output.summary:q} --provenance {output.provenance:q} > {log:q} 2>&1"
