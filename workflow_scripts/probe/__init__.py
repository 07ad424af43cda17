"""Routing-probe analysis: recorded routes, per-layer partitions and retention, and the null model.

Submodules (imported explicitly by callers so that importing this package stays cheap):

- ``routes``      -- record the top-k routes of a checkpoint on the probe pool.
- ``analysis``    -- partitions, modularity and NMI sweeps on :mod:`workflow_scripts.routing_metrics`.
- ``null_model``  -- the marginal-preserving multinomial null model (Appendix B.1).

The routes file itself (written here, read by the report) is :mod:`workflow_scripts.file_formats.routes`.
"""
