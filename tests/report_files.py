"""Report tests' view of result files: any file for the frame readers, declared files only in a sandbox."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from workflow_scripts.cli import main as cli_main
from workflow_scripts.report.inputs import ResultFiles, declared_files


class AnyFile(ResultFiles):
    """Every layout path counts as declared: the readers' own checks (missing file, bad key) are tested."""

    def path(self, locate: Callable[..., Path], *args: Any) -> Path:
        return Path(locate(self.root, *args))


def anywhere(root: Path) -> ResultFiles:
    return AnyFile(Path(root), frozenset())


def sandbox(config: Mapping[str, Any], output_id: str, results: Path, destination: Path) -> list[Path]:
    """Copy into ``destination`` only the files ``output_id``'s rule declares; return those copied.

    A declared file the fixture tree lacks stays absent and unnamed (a command refuses a named input
    that is missing), so a reader that needed it fails here too.
    """
    copied = []
    for path in declared_files(config, output_id, destination):
        source = Path(results) / path.relative_to(destination)
        if source.is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, path)
            copied.append(path)
    return copied


def report_in_sandbox(config: Mapping[str, Any], output_id: str, results: Path, tmp_path: Path) -> Path:
    """Run the report command of ``output_id`` (``table`` or ``figure-data``) on a sandbox of its inputs.

    Returns its CSV. The sandbox holds the declared files only, so the run proves nothing else is read.
    """
    root = tmp_path / "sandbox" / "results"
    declared = sandbox(config, output_id, results, root)
    out = tmp_path / "out"
    common = ["--id", output_id, "--config", json.dumps(config), "--results", str(root)]
    common += ["--inputs", *map(str, declared)]
    if output_id in config["tables"]:
        formats = [f"--{kind}={out / f'{output_id}.{kind}'}" for kind in ("csv", "md", "tex")]
        argv = ["report", "table", *common, *formats]
    else:
        argv = ["report", "figure-data", *common, "--data", str(out / f"{output_id}.csv")]
    assert cli_main(argv) == 0, argv[:4]
    return out / f"{output_id}.csv"
