# Paper tables and figures: each computed from its closure's results and set beside the paper's values.


rule table:
    input:
        unpack(lambda w: report_inputs(w.table)),
    output:
        csv=report(
            "results/tables/{table}.csv",
            caption="captions/table.rst",
            category="Tables",
            labels={"table": "{table}"},
        ),
        md="results/tables/{table}.md",
        tex="results/tables/{table}.tex",
    wildcard_constraints:
        table=alternatives(config["tables"]),
    params:
        config=lambda w: report_config(w.table),
        reference=lambda w, input: f"--reference {input.reference}" if "reference" in input.keys() else "",
    log:
        "logs/report/{table}.log",
    conda:
        "../envs/analysis.yaml"
    envmodules:
        "rpb/analysis",
    shell:
        "python -m workflow_scripts report table --id {wildcards.table} --config {params.config:q}"
        " --results results {params.reference} --csv {output.csv:q} --md {output.md:q} --tex {output.tex:q}"
        " > {log:q} 2>&1"


rule figure:
    input:
        unpack(lambda w: report_inputs(w.figure)),
    output:
        data="results/figures/{figure}.csv",
        png=report(
            "results/figures/{figure}.png",
            caption="captions/figure.rst",
            category="Figures",
            labels={"figure": "{figure}"},
        ),
        pdf="results/figures/{figure}.pdf",
    wildcard_constraints:
        figure=alternatives(config["figures"]),
    params:
        config=lambda w: report_config(w.figure),
    log:
        "logs/report/{figure}.log",
    conda:
        "../envs/analysis.yaml"
    envmodules:
        "rpb/analysis",
    shell:
        "python -m workflow_scripts report figure --id {wildcards.figure} --config {params.config:q}"
        " --results results --data {output.data:q} --png {output.png:q} --pdf {output.pdf:q} > {log:q} 2>&1"
