# Benchmarks -> items -> one suite; checkpoints -> sampled generations -> graded scores and avg@5 (§4, F.3-F.5).

# Downloads run on the submit host, which has the internet and HF_TOKEN (compute nodes often have
# neither): no SLURM job (docs/paper-scale.md).
localrules:
    download_benchmark,


rule download_benchmark:
    output:
        raw=layout.rule_path("benchmark", name=layout.RAW_FILE),
        manifest=layout.rule_path("benchmark", name=layout.MANIFEST_FILE),
    wildcard_constraints:
        benchmark=sourced_from("hub", config["benchmarks"]),
    params:
        repo=lambda w: config["benchmarks"][w.benchmark]["hub"]["repo"],
        revision=hub_revision("benchmarks"),
        subset=lambda w: config["benchmarks"][w.benchmark]["hub"]["config"],
        split=lambda w: config["benchmarks"][w.benchmark]["hub"]["split"],
        rows=lambda w: config["benchmarks"][w.benchmark]["rows"],
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
        "python -m workflow_scripts evaluate download --benchmark {wildcards.benchmark} --rows {params.rows}"
        " --repo {params.repo:q} --revision {params.revision:q} --subset {params.subset:q} --split {params.split:q}"
        " {params.gated}"
        " --out {output.raw:q} --manifest {output.manifest:q} > {log:q} 2>&1"


rule toy_benchmark:
    output:
        raw=layout.rule_path("benchmark", name=layout.RAW_FILE),
        provenance=layout.rule_path("benchmark", name=layout.RAW_PROVENANCE),
    wildcard_constraints:
        benchmark=sourced_from("toy", config["benchmarks"]),
    params:
        rows=config["evaluation"]["toy_benchmark"]["rows"],
        seed=config["evaluation"]["toy_benchmark"]["seed"],
    log:
        "logs/benchmarks/toy/{benchmark}.log",
    conda:
        "../envs/eval.yaml"
    envmodules:
        "rpb/eval",
    shell:
        "python -m workflow_scripts evaluate toy-benchmark --benchmark {wildcards.benchmark}"
        " --rows {params.rows} --seed {params.seed} --out {output.raw:q} --provenance {output.provenance:q}"
        " > {log:q} 2>&1"


rule benchmark_items:
    input:
        raw=layout.rule_path("benchmark", name=layout.RAW_FILE),
    output:
        benchmark_items=layout.rule_path("benchmark", name=layout.ITEMS_FILE),
        provenance=layout.rule_path("benchmark", name=layout.PROVENANCE_FILE),
    params:
        spec=lambda w: config_slice(config["benchmarks"][w.benchmark], ("template",)),
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


rule benchmark_suite:
    input:
        benchmark_items=BENCHMARK_ITEMS,
    output:
        suite=BENCHMARK_SUITE,
        provenance=layout.rule_path("suite", name=layout.SUITE_PROVENANCE),
    log:
        "logs/benchmarks/suite.log",
    conda:
        "../envs/eval.yaml"
    envmodules:
        "rpb/eval",
    shell:
        "python -m workflow_scripts evaluate suite --items {input.benchmark_items:q}"
        " --out {output.suite:q} --provenance {output.provenance:q} > {log:q} 2>&1"


rule generate:
    input:
        checkpoint=evaluated_checkpoint,
        benchmark_suite=BENCHMARK_SUITE,
    output:
        generations=gpu_days(layout.rule_path("eval", name=layout.GENERATIONS_FILE)),
        provenance=layout.rule_path("eval", name=layout.GENERATIONS_PROVENANCE),
    wildcard_constraints:
        evaluated=EVALUATED,
    params:
        sampling=SAMPLING,
        backend=config["evaluation"]["backend"],
        options=GENERATE_OPTIONS,
    log:
        "logs/evals/generate/{model}/{evaluated}.log",
    conda:
        "../envs/eval.yaml"
    envmodules:
        "rpb/eval",
    threads: 1
    shell:
        "OMP_NUM_THREADS={threads} python -m workflow_scripts evaluate generate --checkpoint {input.checkpoint:q}"
        " --items {input.benchmark_suite:q} --sampling {params.sampling:q}"
        " --backend {params.backend} {params.options}"
        " --out {output.generations:q} --provenance {output.provenance:q} > {log:q} 2>&1"


rule score:
    input:
        benchmark_suite=BENCHMARK_SUITE,
        generations=layout.rule_path("eval", name=layout.GENERATIONS_FILE),
    output:
        scores=layout.rule_path("eval", name=layout.SCORES_FILE),
        summary=layout.rule_path("eval", name=layout.SUMMARY_FILE),
        provenance=layout.rule_path("eval", name=layout.PROVENANCE_FILE),
    wildcard_constraints:
        evaluated=EVALUATED,
    params:
        repeats=config["evaluation"]["repeats"],
        limits=SANDBOX_LIMITS,
        workers=config["evaluation"]["grading_workers"],
        math_timeout=config["evaluation"]["math_timeout_seconds"],
        max_response_chars=config["evaluation"]["max_response_chars"],
        identity=evaluated_identity,
    log:
        "logs/evals/score/{model}/{evaluated}.log",
    conda:
        "../envs/eval.yaml"
    envmodules:
        "rpb/eval",
    threads: config["evaluation"]["grading_workers"]
    shell:
        "python -m workflow_scripts evaluate score --items {input.benchmark_suite:q} --generations {input.generations:q}"
        " --repeats {params.repeats} --limits {params.limits:q} --workers {params.workers}"
        " --math-timeout {params.math_timeout} --max-response-chars {params.max_response_chars}"
        " --identity {params.identity:q}"
        " --scores {output.scores:q} --summary {output.summary:q} --provenance {output.provenance:q} > {log:q} 2>&1"
