"""Frozen-base routing priors over Q/A spans (§3.1 eq. (2), Appendix F.7) and their statistics.

* ``workflow_scripts.priors.compute``: ``span_means`` (eq. (2) for a batch), ``compute_prior``
  (one frozen-base pass over a split into an ``N x 2 x L x E`` float32 ``.npy``),
  ``prior_meta`` (what a prior was built from), ``gather_rows``. The checks a reader runs and
  ``load_prior`` live in :mod:`workflow_scripts.file_formats.prior`, below the stages.
* ``workflow_scripts.priors.stats``: ``prior_stats`` (per-row bias spread and clamp
  saturation of a prior file, Table 13 / Appendix F.7).
* ``workflow_scripts.priors.cli``: ``python -m workflow_scripts priors compute``.
"""
