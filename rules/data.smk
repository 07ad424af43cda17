# Raw sources -> scored, selected corpora with held-out probe pools (F.2, F.8).

# Downloads run on the submit host, which has the internet and HF_TOKEN (compute nodes often have
# neither): no SLURM job (docs/paper-scale.md).
localrules:
    download_dataset,


# Sources read only to their first rows (the rehearsal's) pass --first-rows; the paper's pass nothing.
FIRST_ROWS = hub_option("datasets", ("hub", "first_rows"), "--first-rows")


rule download_dataset:
    output:
        multiext(layout.rule_path("raw"), raw=".parquet", manifest=".manifest.json"),
    wildcard_constraints:
        dataset=sourced_from("hub", config["datasets"]),
    params:
        repo=lambda w: config["datasets"][w.dataset]["hub"]["repo"],
        revision=hub_revision("datasets"),
        split=lambda w: config["datasets"][w.dataset]["hub"]["split"],
        format=lambda w: config["datasets"][w.dataset]["format"],
        **FIRST_ROWS,
    log:
        "logs/data/download/{dataset}/{subset}.log",
    conda:
        "../envs/data.yaml"
    envmodules:
        "rpb/data",
    cache: "omit-software"
    resources:
        runtime=240,
        mem_mb=64000,
    shell:
        "python -m workflow_scripts data download --format {params.format} --repo {params.repo:q}"
        " --revision {params.revision:q} --subset {wildcards.subset:q} --split {params.split:q}"
        " --out {output.raw:q} --manifest {output.manifest:q}"
        + (" {params.option}" if FIRST_ROWS else "")
        + " > {log:q} 2>&1"


rule generate_toy_dataset:
    output:
        raw=layout.rule_path("raw", ".parquet"),
        provenance=layout.rule_path("raw", ".provenance.json"),
    wildcard_constraints:
        dataset=sourced_from("toy", config["datasets"]),
    params:
        format=lambda w: config["datasets"][w.dataset]["format"],
        rows=lambda w: config["datasets"][w.dataset]["toy"]["rows"][w.subset],
        seed=lambda w: config["datasets"][w.dataset]["toy"]["seed"],
        bad_fraction=lambda w: config["datasets"][w.dataset]["toy"]["bad_fraction"],
    log:
        "logs/data/toy/{dataset}/{subset}.log",
    conda:
        "../envs/data.yaml"
    envmodules:
        "rpb/data",
    shell:
        "python -m workflow_scripts data toy-raw --format {params.format} --subset {wildcards.subset:q}"
        " --rows {params.rows} --seed {params.seed} --bad-fraction {params.bad_fraction}"
        " --out {output.raw:q} --provenance {output.provenance:q} > {log:q} 2>&1"


rule build_corpus:
    input:
        raw=raw_file,
    output:
        multiext(
            layout.rule_path("corpus", name=""),
            **dag_inputs.CORPUS_FILES,
            provenance=layout.PROVENANCE_FILE,
        ),
    params:
        format=lambda w: config["datasets"][config["corpora"][w.corpus]["dataset"]]["format"],
        spec=corpus_spec,
        scoring=json.dumps(config["scoring"], sort_keys=True),
    log:
        "logs/data/build/{corpus}.log",
    conda:
        "../envs/data.yaml"
    envmodules:
        "rpb/data",
    cache: "omit-software"
    resources:
        runtime=120,
        mem_mb=64000,
    shell:
        "python -m workflow_scripts data build --raw {input.raw:q} --format {params.format}"
        " --corpus {wildcards.corpus} --spec {params.spec:q} --scoring {params.scoring:q}"
        " --train {output.train:q} --probe {output.probe:q} --report {output.report:q}"
        " --provenance {output.provenance:q} > {log:q} 2>&1"
