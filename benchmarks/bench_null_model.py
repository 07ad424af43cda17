"""Benchmark: the full Appendix B.1 null model for one 26-layer x 64-expert checkpoint.

Per layer: 100 multinomial null graphs, each thresholded at rho = 0.10 and partitioned by Louvain,
plus the observed graph (`null_margins`). Run: ``python benchmarks/bench_null_model.py [--cpu N]``;
the process pins itself to one CPU (``os.sched_setaffinity``) and BLAS/OpenMP to one thread.
Prints the wall time (goal <= 30 s on one core); ``--repeats R`` reruns it and prints the median.
"""

from __future__ import annotations

import os

# Pin BLAS to one thread before numpy loads so the timing is a one-core number.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from single_core import add_cpu_argument, pin  # noqa: E402

from workflow_scripts.probe.null_model import null_margins  # noqa: E402
from workflow_scripts.routing_metrics.communities import louvain  # noqa: E402
from workflow_scripts.routing_metrics.graphs import coactivation_layers, threshold_top_fraction  # noqa: E402

N_LAYERS, N_EXPERTS, K, N_TOKENS, SAMPLES, RHO = 26, 64, 6, 5_000, 100, 0.10


def synthetic_topk(rng: np.random.Generator) -> np.ndarray:
    """(L, N, k) top-k ids from a router with 8 latent expert groups and skewed expert popularity."""
    groups = rng.integers(0, 8, size=(N_LAYERS, N_TOKENS, 1))  # (L, N, 1)
    member = (np.arange(N_EXPERTS) // 8)[None, None, :] == groups  # (L, N, E)
    logits = rng.gumbel(size=(N_LAYERS, N_TOKENS, N_EXPERTS)) + 1.5 * member
    logits += rng.normal(scale=0.5, size=(N_LAYERS, 1, N_EXPERTS))  # per-layer expert popularity
    return np.argsort(-logits, axis=-1)[..., :K]


def run_once(topk: np.ndarray, samples: int) -> tuple[float, list]:
    """Wall time of the full null model of one checkpoint and its per-layer margins."""
    start = time.perf_counter()
    graphs = coactivation_layers(topk, N_EXPERTS)  # (L, E, E)
    results = []
    for layer, w in enumerate(graphs):
        base_labels = louvain(threshold_top_fraction(w, RHO))
        results.append(null_margins(w, base_labels, N_TOKENS, samples=samples, seed=layer, rho=RHO))
    return time.perf_counter() - start, results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_cpu_argument(parser)
    parser.add_argument("--repeats", type=int, default=1, help="runs; the median wall time is reported")
    parser.add_argument("--samples", type=int, default=SAMPLES, help="null graphs per layer (B.1: 100)")
    args = parser.parse_args()
    cpu = pin(args.cpu)
    topk = synthetic_topk(np.random.default_rng(0))
    times = []
    for _ in range(args.repeats):
        elapsed, results = run_once(topk, args.samples)
        times.append(elapsed)
    q_margin = np.mean([r.q_margin for r in results])
    share = np.mean([r.q_beat_share for r in results])
    print(
        f"layers={N_LAYERS} experts={N_EXPERTS} k={K} tokens={N_TOKENS} null samples/layer={args.samples}; "
        f"pinned to CPU {cpu}, one BLAS thread"
    )
    print(f"mean Q margin {q_margin:.3f}; mean share of null graphs beaten on Q {share:.3f}")
    nmi_margin = np.mean([r.nmi_margin for r in results])
    print(f"mean NMI margin {nmi_margin:.4f}; Q margins checksum {sum(r.q_margin for r in results):.12f}")
    runs = ", ".join(f"{t:.1f}" for t in times)
    median = float(np.median(times))
    verdict = "met" if median <= 30.0 else "NOT met"
    print(
        f"wall time: median {median:.1f} s over {len(times)} run(s) [{runs}] "
        f"(goal <= 30 s on one core: {verdict})"
    )


if __name__ == "__main__":
    main()
