"""Preflight: the checklist a paper-scale SLURM run passes before its first ``sbatch`` (issue 31, item 1).

``python -m workflow_scripts preflight [targets]`` checks the SLURM account, partitions, QOS and
GPUs the profiles ask for, the hub's repositories of the targets, their revisions, the free disk
and, on request, the GPU software and the compute nodes' network. Every ``--profile slurm`` run
runs the same checks first, from Snakemake's ``onstart`` hook (rules/common.smk): a hook is no
job of the DAG, so running it again never makes a downstream job out of date.
"""
