"""``data download --gated``: a missing hub token fails with instructions before any hub call."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from workflow_scripts.cli import build_parser, main
from workflow_scripts.data.cli import run_download
from workflow_scripts.errors import UserInputError

SHA = "0123456789abcdef0123456789abcdef01234567"


def fake_hub(monkeypatch: pytest.MonkeyPatch, token: str | None) -> list:
    """Replace ``datasets`` and ``huggingface_hub`` with fakes; returns the list of hub calls made."""
    calls: list = []

    class FakeDataset:
        num_rows = 2

        def to_parquet(self, path: str) -> None:
            pq.write_table(pa.table({"Question": ["q1", "q2"]}), path)

    def load_dataset(repo, subset, split, revision, features=None):
        calls.append(("load", repo, subset, revision))
        return FakeDataset()

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    hub = types.SimpleNamespace(get_token=lambda: token)
    monkeypatch.setitem(sys.modules, "huggingface_hub", hub)
    return calls


def download_args(tmp_path: Path, gated: bool) -> types.SimpleNamespace:
    return types.SimpleNamespace(
        repo="Idavidrein/gpqa",
        revision=SHA,
        format="openr1",
        subset="gpqa_diamond",
        split="train",
        out=str(tmp_path / "gpqa_diamond.parquet"),
        manifest=str(tmp_path / "gpqa_diamond.manifest.json"),
        gated=gated,
        first_rows=None,
    )


def test_gated_without_token_fails_before_any_hub_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = fake_hub(monkeypatch, token=None)
    with pytest.raises(UserInputError) as raised:
        run_download(download_args(tmp_path, gated=True))
    message = str(raised.value)
    for part in ("Idavidrein/gpqa", "gpqa_diamond", "gated", "terms", "HF_TOKEN", "huggingface-cli login"):
        assert part in message
    assert calls == [] and not (tmp_path / "gpqa_diamond.parquet").exists()


@pytest.mark.parametrize(("gated", "token"), [(True, "hf_token"), (False, None)])
def test_download_proceeds_with_a_token_or_when_not_gated(
    gated: bool, token: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = fake_hub(monkeypatch, token=token)
    run_download(download_args(tmp_path, gated=gated))
    assert calls == [("load", "Idavidrein/gpqa", "gpqa_diamond", SHA)]
    assert json.loads((tmp_path / "gpqa_diamond.manifest.json").read_text())["revision_resolved"] == SHA


def test_gated_flag_is_registered_and_reported_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    argv = ["data", "download", "--format", "openr1", "--repo", "Idavidrein/gpqa", "--revision", SHA]
    argv += ["--subset", "gpqa_main"]
    argv += ["--out", str(tmp_path / "g.parquet"), "--manifest", str(tmp_path / "g.json")]
    assert build_parser().parse_args(argv).gated is False
    assert build_parser().parse_args([*argv, "--gated"]).gated is True
    calls = fake_hub(monkeypatch, token=None)
    assert main([*argv, "--gated"]) == 2
    assert "error: Idavidrein/gpqa (config gpqa_main) is a gated dataset" in capsys.readouterr().err
    assert calls == []
