"""Results bundles: the expensive outputs of a run and every record behind them, in one archive.

``export`` packs them for the closure of some tables and figures; ``import`` checks an archive
against its checksum list, its records and this checkout's configuration, and puts its files in
place so that Snakemake rebuilds only what lies downstream (docs: provenance).
"""
