"""Routing structure on numpy arrays: co-activation graphs, communities and routing metrics.

Below the stages because priors (validation), the models stage (base-router report), the probe
and the report all measure routing the same way.

Submodules (imported explicitly by callers so that importing this package stays cheap):

- ``graphs``      -- expert co-activation graphs (eq. 1) and the edge-fraction threshold (§2).
- ``communities`` -- Louvain / Leiden detection and Newman modularity (Appendix F.9).
- ``metrics``     -- community NMI (F.10), marginal shift, top-k overlap, D.2 and Table 11 statistics.

All functions are pure functions on numpy arrays: no file I/O and no torch.
"""
