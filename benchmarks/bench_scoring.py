"""Scoring throughput in rows per second per core (issue 2): ``score_frame`` against a per-row loop.

    python benchmarks/bench_scoring.py [--rows 328000] [--loop-rows 20000] [--domain code] [--repeats 3]

The frame is synthetic: the toy generator's GLM ``main`` subset (code, general and math rows
with reasoning channels, answers of a few hundred to a few thousand characters, 10% bad rows of
every penalty kind, a few over 32,000 characters), written to parquet and read back with
``read_source``, so the scorer sees exactly what ``build_corpus`` gives it. The timed call is
``score_frame`` itself (final-completion cut, every component, every penalty, the output frame).

Single core: the process is pinned to one CPU, polars and Arrow get one thread each, and the
BLAS/OpenMP thread variables are set to 1 before numpy loads, so the rate is rows/s per core.

The reference is the plain Python scorer the tests check against (``tests/scoring_reference.py``:
one row at a time, ``str`` methods and the ``re`` module). It runs on the first ``--loop-rows``
rows only (it is slow); its numbers are checked against ``score_frame`` on those rows (counts and
flags exactly, floats to 1e-9) before the ratio of the two rates is printed, so the ratio compares
like with like. Each side reports its fastest repeat, as timeit advises: on a shared or virtual
machine other load only ever adds time.
"""

from __future__ import annotations

import os

for _variable in (
    "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS", "POLARS_MAX_THREADS"
):  # fmt: skip
    os.environ[_variable] = "1"

import argparse  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402

import pandas as pd  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
import yaml  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from single_core import pin  # noqa: E402

from tests.scoring_reference import RowScorer, check_same, score_rows  # noqa: E402
from workflow_scripts.chat_sources import toy  # noqa: E402
from workflow_scripts.chat_sources.readers import read_source  # noqa: E402
from workflow_scripts.data import scoring  # noqa: E402

CONFIG = Path(__file__).resolve().parents[1] / "config.yaml"
GOAL_ROWS_PER_S = 50_000


def single_core() -> str:
    """Pin this process to one CPU and give Arrow one thread (polars: POLARS_MAX_THREADS above)."""
    pa.set_cpu_count(1)
    pa.set_io_thread_count(1)
    if hasattr(os, "sched_setaffinity"):
        cpu = pin()
        return f"pinned to CPU {cpu}; polars and arrow cpu/io threads 1; OMP/OpenBLAS/MKL threads 1"
    return "polars and arrow cpu/io threads 1; OMP/OpenBLAS/MKL threads 1 (no CPU pinning on this OS)"


def synthetic_source(rows: int, seed: int) -> pd.DataFrame:
    """Toy GLM ``main`` rows through parquet and ``read_source``, as the pipeline reads them."""
    table = toy.generate("glm_sharegpt", "main", rows=rows, seed=seed, bad_fraction=0.1)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "raw.parquet"
        pq.write_table(table, path)
        return read_source(path, "glm_sharegpt")


def best_time(repeats: int, function: Callable[[], object]) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - start)
    return min(times), result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=328_000, help="synthetic rows to score (default 328,000)")
    parser.add_argument("--loop-rows", type=int, default=20_000, help="rows for the per-row reference")
    parser.add_argument("--domain", choices=scoring.DOMAINS, default="code", help="corpus domain to score as")
    parser.add_argument("--repeats", type=int, default=3, help="timing repeats (the fastest is reported)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    print(single_core())
    config = scoring.ScoringConfig.from_dict(yaml.safe_load(CONFIG.read_text())["scoring"])
    source = synthetic_source(args.rows, args.seed)
    answer_chars = source["answer_raw"].str.len()
    print(
        f"frame: {len(source):,} rows (toy glm_sharegpt main: code/general/math, 10% bad rows), "
        f"raw answer chars median {answer_chars.median():,.0f}, mean {answer_chars.mean():,.0f}; "
        f"domain {args.domain}"
    )

    vector_s, scored = best_time(args.repeats, lambda: scoring.score_frame(source, args.domain, config))
    sample = source.iloc[: args.loop_rows]
    loop_s, reference = best_time(1, lambda: score_rows(sample, RowScorer(config, args.domain)))
    max_diff = check_same(scored.iloc[: len(sample)], reference)

    vector_rate, loop_rate = len(source) / vector_s, len(sample) / loop_s
    print(f"score_frame (vectorised): {vector_s:8.2f} s for {len(source):,} rows = ", end="")
    print(f"{vector_rate:10,.0f} rows/s/core")
    print(
        f"per-row Python reference: {loop_s:8.2f} s for {len(sample):,} rows = {loop_rate:10,.0f} rows/s/core"
    )
    print(f"same scores on the {len(sample):,} reference rows (largest float difference {max_diff:.1e})")
    print(f"ratio (vectorised / per-row): {vector_rate / loop_rate:.1f}x")
    verdict = "met" if vector_rate >= GOAL_ROWS_PER_S else "NOT met"
    print(f"goal {GOAL_ROWS_PER_S:,} rows/s/core: {verdict} ({vector_rate / GOAL_ROWS_PER_S:.0%} of goal)")


if __name__ == "__main__":
    main()
