# One manifest per table and figure: its closure, input checksums, upstream records.

localrules:
    provenance_manifest,



rule provenance_manifest:
    input:
        lambda w: output_files(w.output) + closure_inputs(w.output),
    output:
        "results/provenance/{output}.json",
    wildcard_constraints:
        output=alternatives(OUTPUTS),
    params:
        entry=lambda w: json.dumps(OUTPUTS[w.output], sort_keys=True),
        closure=lambda w: json.dumps(registry.closure(config, w.output).as_dict(), sort_keys=True),
        config=json.dumps(config, sort_keys=True),
    log:
        "logs/provenance/{output}.log",
    conda:
        "../envs/analysis.yaml"
    envmodules:
        "rpb/analysis",
    shell:
        "python -m workflow_scripts provenance manifest --output-id {wildcards.output}"
        " --entry {params.entry:q} --closure {params.closure:q} --config {params.config:q}"
        " --inputs {input:q} --out {output:q} > {log:q} 2>&1"
