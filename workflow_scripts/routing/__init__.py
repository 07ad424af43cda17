"""Router math of the paper, in one place.

* ``workflow_scripts.routing.core``: backend-agnostic torch functions on router logits:
  the prior -> bias conversion (eq. 3), the soft bias (eq. 4), the RPB-hard override, and
  the router-side losses (KL-to-base, centred logit-L2, Router-L2 (eq. 5), load balancing,
  z-loss).
* ``workflow_scripts.routing.hf``: applies them to transformers MoE gates by a per-instance
  forward override, and records the unbiased router logits.
* ``workflow_scripts.routing.megatron``: applies them inside Megatron-Core's ``TopKRouter`` (a
  subclass overriding ``routing()`` only, swapped onto built routers); imports Megatron-Core.
"""
