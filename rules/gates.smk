# Sanity gates: does routing carry the task, does SFT learn in domain, and how SFT moves out of domain
# (workflow_scripts/report/gates.py).
# The low-noise metric they read: teacher-forced gold-answer log-likelihood per evaluated checkpoint,
# the base model's also under the global-hard and own-prior-hard routing overrides.

from workflow_scripts.report.gates import gate_files, gate_runs

GATE_RUNS = gate_runs(config)
GATE_FILES = gate_files(GATE_RUNS)
BENCHMARK_FAMILIES = json.dumps({name: spec["family"] for name, spec in config["benchmarks"].items()}, sort_keys=True)
# The named target; part of `all` at toy scale (layout.GATES_SCALES; a paper-scale run asks for it by
# name), where the claims table reads it too (report/inputs.py).
GATE_TARGETS = [layout.rule_path("table", suffix, table=layout.GATES_TABLE) for suffix in (".md", ".csv")]
GATE_DEFAULT = GATE_TARGETS if config["scale"] in layout.GATES_SCALES else []


rule likelihood:
    input:
        checkpoint=evaluated_checkpoint,
        benchmark_suite=BENCHMARK_SUITE,
    output:
        likelihood=layout.rule_path("eval", name=layout.LIKELIHOOD_FILE),
        summary=layout.rule_path("eval", name=layout.LIKELIHOOD_SUMMARY),
        provenance=layout.rule_path("eval", name=layout.LIKELIHOOD_PROVENANCE),
    wildcard_constraints:
        evaluated=EVALUATED,
    params:
        routings=lambda w: "own own_prior_hard global_hard" if w.evaluated == "base" else "own",
        gold="toy" if config["scale"] == "toy" else "answer_line",
        families=BENCHMARK_FAMILIES,
        identity=evaluated_identity,
    log:
        "logs/evals/likelihood/{model}/{evaluated}.log",
    conda:
        "../envs/eval.yaml"
    envmodules:
        "rpb/eval",
    threads: 1
    shell:
        "OMP_NUM_THREADS={threads} python -m workflow_scripts evaluate likelihood --checkpoint {input.checkpoint:q}"
        " --items {input.benchmark_suite:q} --routings {params.routings} --gold {params.gold} --seed 0"
        " --families {params.families:q} --identity {params.identity:q}"
        " --out {output.likelihood:q} --summary {output.summary:q} --provenance {output.provenance:q} > {log:q} 2>&1"


rule gates:
    input:
        **GATE_FILES,
    output:
        md=layout.rule_path("table", ".md", table=layout.GATES_TABLE),
        csv=layout.rule_path("table", ".csv", table=layout.GATES_TABLE),
        provenance=layout.rule_path("table", ".provenance.json", table=layout.GATES_TABLE),
    params:
        models=" ".join(GATE_RUNS.models),
        runs=json.dumps([{"model": e.model, "corpus": e.corpus} for e in GATE_RUNS.sft]),
        families=BENCHMARK_FAMILIES,
        domains=json.dumps({name: spec["domain"] for name, spec in config["corpora"].items()}, sort_keys=True),
        spread_factor=config["claim_rules"]["spread_factor"],
        scale=config["scale"],
    log:
        "logs/report/gates.log",
    conda:
        "../envs/analysis.yaml"
    envmodules:
        "rpb/analysis",
    shell:
        "python -m workflow_scripts report gates --base-likelihood {input.base:q} --base-models {params.models}"
        " --base-scores {input.base_scores:q} --sft-likelihood {input.sft:q} --sft-runs {params.runs:q}"
        " --sft-scores {input.sft_scores:q} --families {params.families:q} --domains {params.domains:q}"
        " --spread-factor {params.spread_factor} --scale {params.scale}"
        " --csv {output.csv:q} --md {output.md:q} --provenance {output.provenance:q} > {log:q} 2>&1"
