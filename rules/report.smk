# Paper tables and figures: each computed from exactly the result files it reads (report_inputs), set beside
# the paper's values. A figure's numbers (figure_data) and its drawing (figure) are separate jobs, so a
# restyled plot redraws from the CSV without recomputing.


rule table:
    input:
        unpack(lambda w: report_inputs(w.table)),
    output:
        csv=report(
            layout.rule_path("table", ".csv"),
            caption="captions/table.rst",
            category="Tables",
            labels={"table": "{table}"},
        ),
        md=layout.rule_path("table", ".md"),
        tex=layout.rule_path("table", ".tex"),
        provenance=layout.rule_path("table", ".provenance.json"),
    wildcard_constraints:
        table=alternatives(config["tables"]),
    params:
        config=lambda w: report_config(w.table),
        results=results_root,
        reference=reference_arguments,
    log:
        "logs/report/{table}.log",
    conda:
        "../envs/analysis.yaml"
    envmodules:
        "rpb/analysis",
    shell:
        "python -m workflow_scripts report table --id {wildcards.table} --config {params.config:q}"
        " --results {params.results:q} --inputs {input.files:q} {params.reference}"
        " --csv {output.csv:q} --md {output.md:q} --tex {output.tex:q} --provenance {output.provenance:q}"
        " > {log:q} 2>&1"


rule figure_data:
    input:
        unpack(lambda w: report_inputs(w.figure)),
    output:
        data=layout.rule_path("figure", ".csv"),
        provenance=layout.rule_path("figure", ".data-provenance.json"),
    wildcard_constraints:
        figure=alternatives(config["figures"]),
    params:
        config=lambda w: report_config(w.figure),
        results=results_root,
    log:
        "logs/report/{figure}.data.log",
    conda:
        "../envs/analysis.yaml"
    envmodules:
        "rpb/analysis",
    shell:
        "python -m workflow_scripts report figure-data --id {wildcards.figure} --config {params.config:q}"
        " --results {params.results:q} --inputs {input.files:q} --data {output.data:q} --provenance {output.provenance:q}"
        " > {log:q} 2>&1"


rule figure:
    input:
        data=layout.rule_path("figure", ".csv"),
    output:
        png=report(
            layout.rule_path("figure", ".png"),
            caption="captions/figure.rst",
            category="Figures",
            labels={"figure": "{figure}"},
        ),
        pdf=layout.rule_path("figure", ".pdf"),
        provenance=layout.rule_path("figure", ".provenance.json"),
    wildcard_constraints:
        figure=alternatives(config["figures"]),
    log:
        "logs/report/{figure}.plot.log",
    conda:
        "../envs/analysis.yaml"
    envmodules:
        "rpb/analysis",
    shell:
        "python -m workflow_scripts report figure-plot --id {wildcards.figure} --data {input.data:q}"
        " --png {output.png:q} --pdf {output.pdf:q} --provenance {output.provenance:q} > {log:q} 2>&1"
