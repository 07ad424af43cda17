"""The one shape every reproduced table takes between computing it and rendering it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from workflow_scripts import registry
from workflow_scripts.report.inputs import ResultFiles, declared_files


@dataclass(frozen=True)
class ReportInputs:
    """What a table or figure function reads: the validated registry and its declared result files.

    ``reference`` is the paper's values (``reference.load_reference``) for a table that computes
    with them (the claims table's verdicts); the others are set beside them only when rendered.
    """

    config: Mapping[str, Any]
    output_id: str
    results: ResultFiles
    reference: pd.DataFrame | None = None

    @classmethod
    def at(
        cls, config: Mapping[str, Any], output_id: str, root: Path, reference: pd.DataFrame | None = None
    ) -> ReportInputs:
        """The inputs the output's rule declares (``inputs.declared_files``), under the results ``root``."""
        files = ResultFiles(root, frozenset(declared_files(config, output_id, root)))
        return cls(config, output_id, files, reference)

    @property
    def entry(self) -> Mapping[str, Any]:
        """The output's registry entry (``tables.<id>`` or ``figures.<id>``)."""
        section = "tables" if self.output_id in self.config["tables"] else "figures"
        return self.config[section][self.output_id]

    @property
    def title(self) -> str:
        return self.entry["title"]

    @property
    def cells(self) -> list[Mapping[str, Any]]:
        return list(self.entry["cells"])

    @property
    def closure(self) -> registry.Closure:
        return registry.closure(self.config, self.output_id)

    def rank(self, key: str) -> dict[str, int]:
        """Position of each id of ``key`` (models, corpora, conditions) in the output's cells.

        Ids are ranked in the order the cells first list them; panels, rows and frame rows
        follow this order.
        """
        seen: dict[str, None] = {}
        for cell in self.cells:
            seen.update(dict.fromkeys(cell.get(key, [])))
        return {name: index for index, name in enumerate(seen)}


@dataclass(frozen=True)
class Table:
    """A reproduced paper table as tidy rows plus what rendering needs.

    ``rows`` has one row per table row: the ``keys`` columns (registry ids such
    as ``corpus``/``condition``/``model``, or a table's own row key such as
    ``rho``), then for every value column ``c`` of ``columns``: ``c`` (the mean,
    NaN where the cell is absent), ``f"{c}_sd"`` (sample sd across training or
    probed seeds, NaN for a single seed) and ``f"{c}_n"`` (how many seeds the
    mean covers; 0 for quantities that have no seed, such as base or prior-side
    values). The paper's published values are matched on ``keys`` + column id.
    """

    table_id: str
    title: str
    keys: tuple[str, ...]
    columns: tuple[str, ...]
    rows: pd.DataFrame
    labels: Mapping[str, str] = field(default_factory=dict)
    bold: Mapping[str, str] = field(default_factory=dict)
    block: str | None = None
    notes: tuple[str, ...] = ()
    digits: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        expected = list(self.keys)
        for column in self.columns:
            expected += [column, f"{column}_sd", f"{column}_n"]
        missing = [name for name in expected if name not in self.rows.columns]
        if missing:
            raise ValueError(f"{self.table_id}: rows lack columns {missing}")
        for column, direction in self.bold.items():
            if column not in self.columns or direction not in ("max", "min"):
                raise ValueError(
                    f"{self.table_id}: bold[{column!r}] = {direction!r} is not max/min of a column"
                )
        if self.block is not None and self.block not in self.keys:
            raise ValueError(f"{self.table_id}: block {self.block!r} is not a key column")


def summarize_seeds(frame: pd.DataFrame, keys: Sequence[str], columns: Sequence[str]) -> pd.DataFrame:
    """Mean, sample sd (ddof 1, NaN for one seed) and seed count of ``columns`` per ``keys`` group (F.5).

    ``frame`` holds one row per seed (the seed column itself is not needed);
    the result has the ``keys`` columns and ``c``, ``c_sd``, ``c_n`` per column.
    """
    grouped = frame.groupby(list(keys), sort=False, dropna=False)
    parts = []
    for column in columns:
        stats = grouped[column].agg(["mean", "std", "count"])
        stats.columns = [column, f"{column}_sd", f"{column}_n"]
        parts.append(stats)
    return pd.concat(parts, axis=1).reset_index()
