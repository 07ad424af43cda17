"""rpb-repro: the Python package behind the Snakemake rules (one subpackage per stage)."""

__version__ = "0.1.0"
