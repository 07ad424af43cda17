"""rpb-repro: reproduce every table and figure of "Router Prior Bias" (Lee et al., 2026).

    snakemake --profile profiles/local    # toy scale, one machine, minutes
    snakemake --profile slurm             # paper scale, H200 nodes through SLURM (profiles/slurm)
    snakemake results/provenance/table5.json --profile profiles/local   # one table's closure
"""

import sys

from snakemake.utils import min_version

min_version("9.0")

sys.path.insert(0, workflow.basedir)


report: "rules/captions/workflow.rst"


include: "rules/common.smk"
include: "rules/data.smk"
include: "rules/models.smk"
include: "rules/priors.smk"
include: "rules/train.smk"
include: "rules/probe.smk"
include: "rules/evaluate.smk"
include: "rules/report.smk"
include: "rules/provenance.smk"
include: "rules/gates.smk"


rule all:
    input:
        all_targets(),
        GATE_DEFAULT,
    default_target: REHEARSAL_TARGETS is None


# Under the rehearsal overlay (profiles/rehearsal) the default target is its own: a few outputs whose
# closure reaches every rule kind and every condition kind of `all` once; `all` stays a target.
if REHEARSAL_TARGETS is not None:

    rule rehearsal:
        input:
            REHEARSAL_TARGETS,
        default_target: True
