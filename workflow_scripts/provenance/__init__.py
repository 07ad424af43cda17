"""The provenance stage: a table's or figure's manifest, and the audit of its recorded chain.

The records every command writes, and the check of a command's inputs against them, live
below the stages in :mod:`workflow_scripts.records`.
"""
