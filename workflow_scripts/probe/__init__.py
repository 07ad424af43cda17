"""Routing-probe analysis: co-activation graphs, communities, routing metrics and the null model.

Submodules (imported explicitly by callers so that importing this package stays cheap):

- ``graphs``      -- expert co-activation graphs (eq. 1) and the edge-fraction threshold (§2).
- ``communities`` -- Louvain / Leiden detection and Newman modularity (Appendix F.9).
- ``metrics``     -- community NMI (F.10), marginal shift, top-k overlap, D.2 and Table 11 statistics.
- ``null_model``  -- the marginal-preserving multinomial null model (Appendix B.1).

All functions are pure functions on numpy arrays: no file I/O and no torch.
"""
