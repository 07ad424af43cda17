"""The synthetic mixed-domain corpus the toy bases are pretrained on.

Rows come from the toy generator (math, code and general domains) with no bad
rows and a seed of their own, so the pretraining text never repeats the toy
post-training corpora, and without the sub-skills ``toy_tasks`` holds back for post-training
to teach; the final completion is used, as for post-training.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

REPORT_DOMAINS = ("math", "code", "general")


def synthetic_rows(rows_per_subset: Mapping[str, int], seed: int) -> pd.DataFrame:
    """(prompt, answer, domain) rows from the toy generator's GLM-format subsets."""
    from workflow_scripts.chat_sources.completions import final_completion
    from workflow_scripts.chat_sources.readers import read_source
    from workflow_scripts.chat_sources.toy import generate

    frames = []
    with tempfile.TemporaryDirectory() as tmp:
        for offset, (subset, rows) in enumerate(sorted(rows_per_subset.items())):
            table = generate("glm_sharegpt", subset, rows, seed + offset, bad_fraction=0.0, held_back=False)
            path = Path(tmp) / f"{subset}.parquet"
            pq.write_table(table, path)
            source = read_source(path, "glm_sharegpt")
            answers = final_completion(pa.array(source["answer_raw"].tolist(), pa.string())).to_list()
            domains = table.column("domain").to_pylist()
            frames.append(
                pd.DataFrame({"prompt": source["prompt_raw"], "answer": answers, "domain": domains})
            )
    return pd.concat(frames, ignore_index=True)


def split_report_rows(rows: pd.DataFrame, per_domain: int) -> tuple[pd.DataFrame, dict[str, pd.DataFrame]]:
    """Hold out the last ``per_domain`` rows of each domain for the routing report."""
    held = {d: rows[rows["domain"] == d].tail(per_domain) for d in REPORT_DOMAINS}
    missing = [d for d, frame in held.items() if frame.empty]
    if missing:
        raise ValueError(f"the synthetic corpus has no rows of domains {missing}")
    held_index = [index for frame in held.values() for index in frame.index]
    return rows.drop(index=held_index), held
