"""Hub sources pinned to commits: the lock file, resolving refs once, loading a dataset at a commit.

``config.yaml`` may name a ref (``main``, a branch or tag) for a hub dataset, model or benchmark;
``python -m workflow_scripts lock`` resolves each such ref to a commit once, before the first
download, and writes ``hub.lock.yaml``. Every download rule takes its revision from
``locked_revision``, so its params hold the commit either way: replacing ``main`` by the locked
commit in ``config.yaml`` later changes no job's params and reruns nothing. A download refuses
a revision that is not a commit (``require_commit``), so no job ever runs on a moving ref.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from workflow_scripts.errors import UserInputError

#: The lock file, beside ``config.yaml`` at the repository root: a user commits both.
LOCK_FILE = "hub.lock.yaml"
LOCK_COMMAND = "python -m workflow_scripts lock"
COMMIT = re.compile(r"[0-9a-f]{40}")
#: Registry sections with hub sources, and the hub's repository type of each (benchmarks are datasets).
REPO_TYPES = {"datasets": "dataset", "models": "model", "benchmarks": "dataset"}
#: The lock's top-level key per repository type: the hub keeps dataset and model ids apart.
LOCK_KEYS = {"dataset": "dataset_repos", "model": "model_repos"}
_HEADER = f"""\
# Hub commits of the refs config.yaml names (repository type, id, ref -> commit), written by
# `{LOCK_COMMAND}` before the first download. Commit this file with config.yaml: every
# download rule reads its revision from here, so each job's params hold the commit, and writing a
# commit into config.yaml later reruns nothing. `{LOCK_COMMAND} --update` moves the refs on.
"""

#: (repository type, repository id, ref) -> commit.
Lock = dict[tuple[str, str, str], str]


@dataclass(frozen=True)
class HubSource:
    """One hub revision of the registry: where it is configured and what it names."""

    key: str  # the config key of the revision, e.g. "datasets.glm51.hub.revision"
    repo_type: str  # "dataset" or "model"
    repo: str
    revision: str  # as configured: a commit, or a ref to resolve

    @property
    def pinned(self) -> bool:
        return is_commit(self.revision)


def is_commit(revision: str) -> bool:
    """Whether ``revision`` is a full commit hash (40 lowercase hex digits), which never moves."""
    return COMMIT.fullmatch(revision) is not None


def hub_source(config: Mapping[str, Any], section: str, name: str) -> HubSource:
    """The hub revision of registry entry ``section.name`` (a dataset, model or benchmark)."""
    entry = config[section][name]["hub"]
    key = f"{section}.{name}.hub.revision"
    return HubSource(key, REPO_TYPES[section], entry["repo"], str(entry["revision"]))


def hub_sources(config: Mapping[str, Any], sections: Iterable[str] = tuple(REPO_TYPES)) -> list[HubSource]:
    """Every hub revision of ``sections``, in registry order (entries without ``hub`` are skipped)."""
    return [
        hub_source(config, section, name)
        for section in sections
        for name in sorted(config[section])
        if "hub" in config[section][name]
    ]


def locked_revision(source: HubSource, lock: Lock) -> str:
    """The commit a download of ``source`` uses: the configured one, else the lock's for its ref.

    A ref the lock lacks comes back unchanged, so that a dry run before the lock still plans
    (showing ``--revision main``); the download itself then refuses it (``require_commit``).
    """
    if source.pinned:
        return source.revision
    return lock.get((source.repo_type, source.repo, source.revision), source.revision)


def unlocked(config: Mapping[str, Any], lock: Lock, sections: Iterable[str] = tuple(REPO_TYPES)) -> list[str]:
    """Config keys of refs (not commits) in ``sections`` that the lock does not resolve."""
    return [
        source.key for source in hub_sources(config, sections) if not is_commit(locked_revision(source, lock))
    ]


def require_commit(repo: str, revision: str) -> None:
    """Refuse a download of a ref: what it fetches would depend on the day it runs."""
    if not is_commit(revision):
        raise UserInputError(
            f"{repo}: revision {revision!r} is a ref, not a commit; run '{LOCK_COMMAND}' once before the "
            f"first download (it resolves every ref of config.yaml into {LOCK_FILE}, which the download "
            "rules read), or write a 40-hex commit into config.yaml"
        )


def read_lock(path: str | Path) -> Lock:
    """The lock at ``path``; no file is an empty lock (nothing resolved yet)."""
    path = Path(path)
    if not path.exists():
        return {}
    try:
        document = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as error:
        raise UserInputError(f"{path}: not valid YAML ({error}); rewrite it with '{LOCK_COMMAND}'") from None
    unknown = set(document) - set(LOCK_KEYS.values()) if isinstance(document, dict) else None
    if unknown is None or unknown:
        raise UserInputError(
            f"{path}: expected the keys {sorted(LOCK_KEYS.values())} only; found {document!r}"
        )
    lock: Lock = {}
    for repo_type, key in LOCK_KEYS.items():
        for repo, refs in (document.get(key) or {}).items():
            for ref, commit in (refs or {}).items() if isinstance(refs, dict) else [(None, refs)]:
                if ref is None or not isinstance(commit, str) or not is_commit(commit):
                    raise UserInputError(
                        f"{path}: {key}.{repo}: expected ref: <40-hex commit> entries, found {refs!r}"
                    )
                lock[(repo_type, str(repo), str(ref))] = commit
    return lock


def lock_text(lock: Lock) -> str:
    """The lock as YAML, sorted, under a header saying what it is and how to refresh it."""
    document: dict[str, dict[str, dict[str, str]]] = {}
    for (repo_type, repo, ref), commit in sorted(lock.items()):
        document.setdefault(LOCK_KEYS[repo_type], {}).setdefault(repo, {})[ref] = commit
    return _HEADER + yaml.safe_dump(document, sort_keys=True, default_flow_style=False)


@dataclass(frozen=True)
class Resolution:
    """What locking did for one ref: the commit, and whether it was looked up now."""

    repo_type: str
    repo: str
    ref: str
    commit: str
    status: str  # "resolved" (looked up now), "kept" (from the existing lock)


def resolve_lock(
    sources: Iterable[HubSource],
    lock: Lock,
    resolve: Callable[[str, str, str], str],
    update: bool = False,
) -> tuple[Lock, list[Resolution]]:
    """The new lock for ``sources``: each distinct ref resolved once, the old lock's entries kept.

    ``resolve(repo_type, repo, ref)`` asks the hub for the commit of ``ref``. A source already
    pinned to a commit needs no entry and no lookup. An entry of ``lock`` is kept unless
    ``update``, so running the lock again never moves a ref (and reruns nothing); entries no
    source names any more are dropped.
    """
    wanted = dict.fromkeys((s.repo_type, s.repo, s.revision) for s in sources if not s.pinned)
    new: Lock = {}
    done = []
    for entry in wanted:
        if entry in lock and not update:
            new[entry] = lock[entry]
            done.append(Resolution(*entry, lock[entry], "kept"))
            continue
        commit = resolve(*entry)
        if not is_commit(commit):
            raise UserInputError(f"the hub answered {commit!r} for {entry[1]} at {entry[2]!r}, not a commit")
        new[entry] = commit
        done.append(Resolution(*entry, commit, "resolved"))
    return new, done


def hub_resolver(api: Any) -> Callable[[str, str, str], str]:
    """``resolve`` for ``resolve_lock`` through a ``huggingface_hub.HfApi``: the commit of a ref."""

    def resolve(repo_type: str, repo: str, ref: str) -> str:
        info = api.model_info if repo_type == "model" else api.dataset_info
        return info(repo, revision=ref).sha

    return resolve


def require_token(repo: str, subset: str) -> None:
    """Refuse a gated dataset without a hub token before any hub call: one line, not a 401 in datasets."""
    import huggingface_hub

    if huggingface_hub.get_token() is None:
        raise UserInputError(
            f"{repo} (config {subset}) is a gated dataset and no Hugging Face token was found: "
            f"accept its terms at https://huggingface.co/datasets/{repo} while logged in, then set "
            "HF_TOKEN to a read token or run 'huggingface-cli login'"
        )


def load_dataset_at(
    repo: str, subset: str, split: str, commit: str, features: Any = None, rows: int | None = None
) -> Any:
    """One split of a hub dataset at ``commit`` as a ``datasets.Dataset``, its columns ``features``.

    ``features`` (a ``datasets.Features``) fixes the schema where the data files would otherwise
    decide it: the JSON loader infers one from the first ~10 MB and stops at a later row that
    does not fit. A build the declared features do not fit is reported in one line. With
    ``rows``, only the split's first rows are read, streamed: the rehearsal's few hundred rows of
    GLM-5.1 need not download its 19.6 GB ``main`` subset.
    """
    import datasets

    require_commit(repo, commit)
    try:
        if rows is not None:
            stream = datasets.load_dataset(
                repo, subset, split=split, revision=commit, features=features, streaming=True
            )
            return datasets.Dataset.from_list(list(stream.take(rows)), features=stream.features)
        return datasets.load_dataset(repo, subset, split=split, revision=commit, features=features)
    except datasets.exceptions.DatasetGenerationError as error:
        cause = str(error.__cause__ or error).strip().splitlines()[0]
        declared = f"the declared features {sorted(features)}" if features else "no declared features"
        raise UserInputError(
            f"{repo} ({subset}, {split}) at {commit}: datasets could not build its rows with {declared} "
            f"({type(error.__cause__ or error).__name__}: {cause})"
        ) from error


def write_download(dataset: Any, out: str | Path, manifest: str | Path, record: Mapping[str, Any]) -> None:
    """Write ``dataset`` to parquet at ``out`` atomically, and its manifest: ``record``, rows and sha256."""
    from workflow_scripts.atomic import atomic_path, write_json
    from workflow_scripts.records import file_sha256

    with atomic_path(out) as tmp:
        dataset.to_parquet(str(tmp))
    write_json(
        manifest,
        {
            **record,
            "rows": int(dataset.num_rows),
            "parquet": str(out),
            "parquet_sha256": file_sha256(Path(out)),
        },
    )
