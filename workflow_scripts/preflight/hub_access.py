"""The hub half of preflight: every repository of the run readable with this token, every revision a commit.

Through ``huggingface_hub``'s own client (``HfApi``: ``model_info``/``dataset_info`` at the
configured revision, ``auth_check`` for a gated repository, ``whoami`` for the token), so the
answers are the ones a download will get. Three failures read differently: the hub out of reach
(network, proxy, ``HF_ENDPOINT``), the token refused (authentication), and a repository or
revision that does not exist (the config key to correct).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import Any

from workflow_scripts.hub import LOCK_COMMAND, LOCK_FILE
from workflow_scripts.preflight.checklist import FAIL, OK, SKIPPED, Check, named_list
from workflow_scripts.preflight.targets import HubRepo

COMMIT = re.compile(r"[0-9a-f]{40}")
_NETWORK_MODULES = ("httpx", "httpx2", "httpcore", "requests", "urllib3", "socket", "ssl")
UNREACHABLE = "the hub is unreachable"


DEFAULT_ENDPOINT = "https://huggingface.co"
MISSING_CLIENT = (
    "huggingface_hub is not installed in the Python that runs preflight (and Snakemake): install "
    "it (envs/requirements-local.txt pins it) to check the hub"
)


def endpoint() -> str:
    """The hub's address as ``huggingface_hub`` reads it: ``HF_ENDPOINT``, else huggingface.co."""
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def token() -> str | None:
    """The token ``huggingface_hub`` would send (``HF_TOKEN``, else ``hf auth login``'s), if any."""
    try:
        from huggingface_hub import get_token
    except ImportError:
        return os.environ.get("HF_TOKEN") or None
    return get_token()


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def classify(error: BaseException) -> str:
    """``gated``, ``revision``, ``missing``, ``token``, ``offline``, ``http``, ``network``; else re-raised."""
    from huggingface_hub import errors

    if isinstance(error, errors.GatedRepoError):
        return "gated"
    if isinstance(error, errors.RevisionNotFoundError):
        return "revision"
    if isinstance(error, errors.RepositoryNotFoundError):
        return "missing"
    if isinstance(error, errors.OfflineModeIsEnabled):
        return "offline"
    if isinstance(error, errors.HfHubHTTPError):
        status = error.response.status_code if error.response is not None else None
        return "token" if status == 401 else "http"
    if type(error).__module__.partition(".")[0] in _NETWORK_MODULES or isinstance(
        error, (OSError, TimeoutError)
    ):
        return "network"
    raise error


def _status(error: BaseException) -> str:
    response = getattr(error, "response", None)
    return f"HTTP {response.status_code}" if response is not None else type(error).__name__


def page(hub: str, repo: HubRepo) -> str:
    return f"{hub}/datasets/{repo.repo}" if repo.kind == "dataset" else f"{hub}/{repo.repo}"


def _failure(
    kind: str, error: BaseException, repo: HubRepo, hub: str, token: str | None, user: str | None
) -> str:

    def keys(field: str) -> str:
        return named_list([f"{key}.{field}" for key in repo.keys])

    if kind == "missing":
        seen_by = "your token" if token else "anonymous requests (no token)"
        return f"not found, or private and hidden from {seen_by}: check {keys('repo')} in the config"
    if kind == "revision":
        lock = f" and its ref's commit in {LOCK_FILE}" if repo.revision != repo.configured else ""
        return (
            f"revision {repo.revision} not found in {repo.repo}: check {keys('revision')} in the config{lock}"
        )
    if kind == "gated" and token is None:
        return (
            f"gated, and no token: accept its terms at {page(hub, repo)} while logged in, then set "
            "HF_TOKEN (or run `hf auth login`)"
        )
    if kind == "gated":
        return f"gated, and user {user or 'of this token'} has no access: request access at {page(hub, repo)}"
    if kind == "token":
        return f"the hub rejected the token ({_status(error)}): renew HF_TOKEN (or `hf auth login`)"
    if kind == "offline":
        return "HF_HUB_OFFLINE is set: unset it to check the hub"
    return f"the hub answered {_status(error)}: {_first_line(error)}"


def checks(
    repos: Sequence[HubRepo], hub: str, token: str | None, timeout: float, api: Any = None
) -> list[Check]:
    """The hub's checks of ``repos``: reachability, the token, each repository at its revision, revisions."""
    if not repos:
        return [
            Check(
                "Hugging Face hub", SKIPPED, "no hub repository to download (toy scale, or none in the run)"
            )
        ]
    if api is None:
        try:
            from huggingface_hub import HfApi
        except ImportError:
            return [Check("Hugging Face hub", FAIL, MISSING_CLIENT)]
        api = HfApi(endpoint=hub)
    credential: str | bool = token if token else False
    unreachable: BaseException | None = None
    reached = False
    results: list[tuple[HubRepo, Check, str | None]] = []
    user: str | None = None
    token_check = Check(
        "Hugging Face token",
        SKIPPED,
        "none (HF_TOKEN unset, no `hf auth login`): public repositories need none, gated ones fail below",
    )
    for repo in repos:
        name = f"hub {repo.kind} {repo.repo}@{repo.revision}"
        if unreachable is not None:
            results.append((repo, Check(name, SKIPPED, UNREACHABLE), None))
            continue
        info_of = api.model_info if repo.kind == "model" else api.dataset_info
        try:
            info = info_of(repo.repo, revision=repo.revision, token=credential, timeout=timeout)
        except Exception as error:  # noqa: BLE001 (classify re-raises what it does not know)
            kind = classify(error)
            if kind == "network":
                unreachable = error
                results.append((repo, Check(name, SKIPPED, UNREACHABLE), None))
            else:
                reached = True
                results.append((repo, Check(name, FAIL, _failure(kind, error, repo, hub, token, user)), None))
            continue
        if not reached and token:  # the first answer: now the token can be asked about
            token_check, user = _token_check(api, token, hub)
        reached = True
        gated = bool(getattr(info, "gated", False)) or repo.gated
        detail = f"commit {info.sha}"
        if gated:
            try:
                api.auth_check(repo.repo, repo_type=repo.kind, token=credential)
            except Exception as error:  # noqa: BLE001
                kind = classify(error)
                results.append(
                    (repo, Check(name, FAIL, _failure(kind, error, repo, hub, token, user)), info.sha)
                )
                continue
            detail += ", gated, access granted"
        results.append((repo, Check(name, OK, detail), info.sha))
    if reached and token and token_check.status == SKIPPED:  # every answer was an error: ask anyway
        token_check, user = _token_check(api, token, hub)
    if unreachable is not None and not reached:
        hub_check = Check(
            "Hugging Face hub",
            FAIL,
            f"{hub} is unreachable ({type(unreachable).__name__}: "
            f"{_first_line(unreachable)}): check the network or proxy (HTTPS_PROXY), or "
            "HF_ENDPOINT for a mirror",
        )
        if token:
            token_check = Check("Hugging Face token", SKIPPED, UNREACHABLE)
    elif unreachable is not None:
        hub_check = Check("Hugging Face hub", FAIL, f"{hub} stopped answering ({_first_line(unreachable)})")
    else:
        hub_check = Check("Hugging Face hub", OK, f"{hub} answers")
    return [hub_check, token_check, *(check for _, check, _ in results), _revisions_check(results)]


def _token_check(api: Any, token: str, hub: str) -> tuple[Check, str | None]:
    try:
        user = api.whoami(token=token)["name"]
    except Exception as error:  # noqa: BLE001
        kind = classify(error)
        if kind == "token":
            detail = f"rejected by {hub} ({_status(error)}): renew HF_TOKEN (it comes before `hf auth login`)"
            return Check("Hugging Face token", FAIL, detail), None
        return Check("Hugging Face token", SKIPPED, f"whoami failed: {_first_line(error)}"), None
    return Check("Hugging Face token", OK, f"accepted for user {user}"), user


def _revisions_check(results: Sequence[tuple[HubRepo, Check, str | None]]) -> Check:
    """Every download at a commit (config.yaml's, or the lock's for its ref): a ref fetches that day's."""
    total = sum(len(repo.keys) for repo, _, _ in results)
    locked = sum(len(repo.keys) for repo, _, _ in results if repo.revision != repo.configured)
    moving = [
        f"{key}.revision {repo.configured}" + (f" (today {sha})" if sha else "")
        for repo, _, sha in results
        if not COMMIT.fullmatch(repo.revision)
        for key in repo.keys
    ]
    if not moving:
        source = f" ({locked} through {LOCK_FILE})" if locked else ""
        return Check("hub revisions", OK, f"all {total} are commits{source}")
    return Check(
        "hub revisions",
        FAIL,
        f"{len(moving)} name a moving ref, not a commit, that {LOCK_FILE} does not resolve: "
        f"{named_list(moving)}: run `{LOCK_COMMAND}` once (it resolves every ref into {LOCK_FILE}, which "
        "the downloads read), or write commits into config.yaml",
    )
