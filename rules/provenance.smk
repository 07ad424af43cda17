# One manifest per table and figure: its closure, input checksums, upstream records.

localrules:
    provenance_manifest,
    provenance_audit,



# The manifest checksums the output's files and every stage file behind them. Only the output's
# files are Snakemake inputs: the others are built by the output job's ancestors, so they exist
# before it runs (tests/test_dag.py checks every one), and as inputs they were a third of a
# paper-scale DAG's edges. A change to any of them reruns the output job, and so the manifest.
rule provenance_manifest:
    input:
        lambda w: output_files(w.output),
    output:
        layout.rule_path("provenance", ".json"),
    wildcard_constraints:
        output=alternatives(OUTPUTS),
    params:
        closure_files=lambda w: closure_inputs(w.output),
        entry=lambda w: json.dumps(OUTPUTS[w.output], sort_keys=True),
        closure=lambda w: json.dumps(registry.closure(config, w.output).as_dict(), sort_keys=True),
        config=json.dumps(config, sort_keys=True),
        config_files=CONFIG_FILES,  # recorded, so that an audit can re-read the config it was made with
    log:
        "logs/provenance/{output}.log",
    conda:
        "../envs/analysis.yaml"
    envmodules:
        "rpb/analysis",
    shell:
        "python -m workflow_scripts provenance manifest --output-id {wildcards.output}"
        " --entry {params.entry:q} --closure {params.closure:q} --config {params.config:q}"
        " --config-files {params.config_files:q} --inputs {input:q} {params.closure_files:q}"
        " --out {output:q} > {log:q} 2>&1"


# `snakemake results/provenance/table5.audit.txt`: re-checks the recorded chain behind a table
# (python -m workflow_scripts provenance audit); fails, naming each mismatch, unless all holds.
# A change deeper in the chain than the table's own inputs does not make Snakemake rerun it:
# add `--forcerun provenance_audit` (or run the command) to audit again.
rule provenance_audit:
    input:
        manifest=layout.rule_path("provenance", ".json"),
        closure=lambda w: closure_inputs(w.output),
    output:
        report=layout.rule_path("provenance", ".audit.txt"),
    wildcard_constraints:
        output=alternatives(OUTPUTS),
    params:
        config_files=CONFIG_FILES,
    log:
        "logs/provenance/{output}.audit.log",
    conda:
        "../envs/analysis.yaml"
    envmodules:
        "rpb/analysis",
    shell:
        "python -m workflow_scripts provenance audit {wildcards.output} --config-files {params.config_files:q}"
        " --out {output.report:q} > {log:q} 2>&1"
