"""Routing-probe analysis: recorded routes, per-layer partitions and retention, and the null model.

Submodules (imported explicitly by callers so that importing this package stays cheap):

- ``routes``      -- record and load the top-k routes of a checkpoint on the probe pool.
- ``analysis``    -- partitions, modularity and NMI sweeps on :mod:`workflow_scripts.routing_metrics`.
- ``null_model``  -- the marginal-preserving multinomial null model (Appendix B.1).
"""
