"""The hub's two lookups faked for the lock's tests: ``HfApi`` answering with the hub's own info objects.

Only the lookup a lock makes (``model_info``/``dataset_info`` at a ref, read for ``.sha``) is faked,
with huggingface_hub's own ``ModelInfo``/``DatasetInfo``; ``install`` puts it in place of ``HfApi``.
"""

from __future__ import annotations

import huggingface_hub
import pytest
from huggingface_hub.hf_api import DatasetInfo, ModelInfo

from tests import hub_server


def commit_of(repo: str, ref: str, salt: str = "") -> str:
    """The HTTP stand-in's commit of ``ref`` (tests/hub_server.py); another per salt (the hub moving on)."""
    return hub_server.commit_of(repo, ref + salt)


class FakeHub:
    """``HfApi``'s two lookups, answering with the hub's own info objects; records each call."""

    calls: list[tuple[str, str, str]] = []
    salt = ""

    def __init__(self, *args, **kwargs) -> None:
        pass

    def dataset_info(self, repo_id: str, revision: str | None = None, **kwargs) -> DatasetInfo:
        FakeHub.calls.append(("dataset", repo_id, revision))
        return DatasetInfo(id=repo_id, sha=commit_of(repo_id, revision, FakeHub.salt))

    def model_info(self, repo_id: str, revision: str | None = None, **kwargs) -> ModelInfo:
        FakeHub.calls.append(("model", repo_id, revision))
        return ModelInfo(id=repo_id, sha=commit_of(repo_id, revision, FakeHub.salt))


def install(monkeypatch: pytest.MonkeyPatch) -> type[FakeHub]:
    """Replace ``huggingface_hub.HfApi`` with :class:`FakeHub`, its call list and salt reset."""
    monkeypatch.setattr(huggingface_hub, "HfApi", FakeHub)
    monkeypatch.setattr(FakeHub, "calls", [])
    monkeypatch.setattr(FakeHub, "salt", "")
    return FakeHub
