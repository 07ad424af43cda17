"""A local stand-in for the Hugging Face hub's API, served over HTTP for ``HF_ENDPOINT``.

``huggingface_hub``'s own client talks to it unchanged, so a test exercises the real requests,
headers and error mapping (``hf_raise_for_status``): the answers carry the hub's status codes and
``X-Error-Code``/``X-Error-Message`` headers for a missing repository or revision or file, a gated
repository without access and a rejected token. Served: what preflight reads (a repository's info
at a revision, its auth-check, whoami) and what ``snapshot_download``/``hf_hub_download`` read
(the recursive tree listing, then a HEAD and a GET per file on ``resolve``, answered with the
commit, ETag and length headers the client checks; no xet, no LFS). A repository's files are
those of a local folder at each of its revisions. Every request is recorded, so a test sees
which files a download fetched.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

#: A token the fake hub knows, and the user it belongs to.
TOKEN = "hf_ci_token"
USER = "ci-user"
# Matched on the quoted path: a revision is one segment (its ``/`` quoted), a file's path may have several.
_INFO = re.compile(r"/api/(models|datasets)/([^/]+/[^/]+)/revision/(.+)")
_AUTH = re.compile(r"/api/(models|datasets)/([^/]+/[^/]+)/auth-check")
_TREE = re.compile(r"/api/(models|datasets)/([^/]+/[^/]+)/tree/([^/]+)(?:/(.+))?")
_RESOLVE = re.compile(r"/(datasets/)?([^/]+/[^/]+)/resolve/([^/]+)/(.+)")


def commit_of(repo: str, ref: str = "main") -> str:
    """The stand-in commit a ref of ``repo`` resolves to (40 hex digits, distinct per repository)."""
    return hashlib.sha1(f"{repo}@{ref}".encode()).hexdigest()


def blob_id(path: Path) -> str:
    """A file's git blob id, as the hub's tree lists it and its ETag carries it."""
    data = path.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class Repo:
    """One repository: its type (``model``/``dataset``), refs, whether it is gated, its files' folder."""

    kind: str
    repo: str
    gated: bool = False
    refs: dict[str, str] = field(default_factory=dict)
    files: Path | None = None

    def commit(self, revision: str) -> str | None:
        """The commit of a ref or of a commit the repository has; None for an unknown revision."""
        if revision in self.refs:
            return self.refs[revision]
        return revision if revision in self.refs.values() else None


def repos_of_config(config: Mapping[str, Any], gated: Iterable[str] = ()) -> list[Repo]:
    """Every hub repository of a registry, ``main`` at :func:`commit_of`, gated where the registry says."""
    found: dict[tuple[str, str], Repo] = {}
    for section, kind in (("datasets", "dataset"), ("models", "model"), ("benchmarks", "dataset")):
        for entry in config[section].values():
            repo = entry["hub"]["repo"]
            found.setdefault(
                (kind, repo),
                Repo(
                    kind,
                    repo,
                    gated=repo in set(gated) or bool(entry.get("gated")),
                    refs={"main": commit_of(repo)},
                ),
            )
    return list(found.values())


def pinned_overlay(config: Mapping[str, Any]) -> dict[str, Any]:
    """A config overlay writing each hub revision's :func:`commit_of` commit into the registry."""
    return {
        section: {
            name: {"hub": {"revision": commit_of(entry["hub"]["repo"])}}
            for name, entry in config[section].items()
        }
        for section in ("datasets", "models", "benchmarks")
    }


class Refusal(Exception):
    """The hub's error answer to a request: its status, headers (``X-Error-Code``...) and message."""

    def __init__(self, status: int, headers: Mapping[str, str], message: str) -> None:
        super().__init__(message)
        self.answer = status, dict(headers), {"error": message}


def _error(code: str, message: str, **headers: str) -> dict[str, str]:
    """The headers ``hf_raise_for_status`` maps to an error class and message."""
    return {"X-Error-Code": code, "X-Error-Message": message, **headers}


class HubServer:
    """The stand-in hub on a free local port (``url``) serving ``repos``; ``granted`` read gated ones.

    ``fetched`` lists each (repository, file) a client asked for on ``resolve`` (HEAD or GET).
    """

    def __init__(self, repos: Iterable[Repo], granted: Iterable[str] = (TOKEN,)) -> None:
        self.repos = {(repo.kind, repo.repo): repo for repo in repos}
        self.granted = set(granted)
        self.tokens = {TOKEN: USER} | {token: USER for token in self.granted}
        self.requests: list[tuple[str, str, str | None]] = []  # (method, path, token)
        self.fetched: list[tuple[str, str]] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> HubServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def answer(self, method: str, target: str, token: str | None) -> tuple[int, dict[str, str], Any]:
        """Status, extra headers and body of a request for ``target`` (quoted path and query).

        The body is JSON, or the ``Path`` of a file to send; ``token`` None is anonymous.
        """
        parts = urlsplit(target)
        self.requests.append((method, unquote(parts.path), token))
        try:
            return self._answer(parts.path, parse_qs(parts.query), token)
        except Refusal as refusal:
            return refusal.answer

    def _answer(self, path: str, query: Mapping[str, list[str]], token: str | None) -> tuple[int, dict, Any]:
        if token is not None and token not in self.tokens:
            message = "Invalid credentials in Authorization header"
            raise Refusal(401, {"X-Error-Message": message}, message)
        if path == "/api/whoami-v2":
            if token is None:
                return 401, {}, {"error": "Invalid username or password."}
            return 200, {}, {"type": "user", "name": self.tokens[token], "auth": {"type": "access_token"}}
        if match := _INFO.fullmatch(path):
            repo, commit = self._at_revision(match[1][:-1], match[2], match[3])
            gated = "manual" if repo.gated else False
            info = {"_id": commit[:24], "id": repo.repo, "sha": commit, "private": False, "gated": gated}
            return 200, {}, info
        if match := _AUTH.fullmatch(path):
            self._check_access(self._repo(match[1][:-1], match[2]), token)
            return 200, {}, {}
        if match := _TREE.fullmatch(path):
            repo, _ = self._at_revision(match[1][:-1], match[2], match[3])
            self._check_access(repo, token)
            folder = self._file(repo, unquote(match[4] or ""), commit="")
            found = sorted(folder.rglob("*") if query.get("recursive") == ["true"] else folder.iterdir())
            return 200, {}, [_tree_entry(entry, repo.files) for entry in found]
        if match := _RESOLVE.fullmatch(path):
            repo, commit = self._at_revision("dataset" if match[1] else "model", match[2], match[3])
            self._check_access(repo, token)
            self.fetched.append((repo.repo, unquote(match[4])))
            file = self._file(repo, unquote(match[4]), commit)
            return 200, {"X-Repo-Commit": commit, "ETag": f'"{blob_id(file)}"'}, file
        return 404, {}, {"error": "Not found"}

    def _repo(self, kind: str, name: str) -> Repo:
        repo = self.repos.get((kind, unquote(name)))
        if repo is None:
            raise Refusal(404, {"X-Error-Code": "RepoNotFound"}, "Repository not found")
        return repo

    def _at_revision(self, kind: str, name: str, revision: str) -> tuple[Repo, str]:
        """The repository and the commit of ``revision`` (quoted); the hub's 404 when either is unknown."""
        repo = self._repo(kind, name)
        commit = repo.commit(unquote(revision))
        if commit is None:
            message = f"Invalid rev id: {unquote(revision)}"
            raise Refusal(404, _error("RevisionNotFound", message), message)
        return repo, commit

    def _check_access(self, repo: Repo, token: str | None) -> None:
        """The hub's 403 for a gated repository read without a granted token."""
        if repo.gated and token not in self.granted:
            message = (
                f"Access to {repo.kind} {repo.repo} is restricted."
                " You must have access to it and be authenticated."
            )
            raise Refusal(403, _error("GatedRepo", message), message)

    def _file(self, repo: Repo, name: str, commit: str) -> Path:
        """A file or folder of the repository (``name`` empty: its root); the hub's 404 when it has none.

        ``commit``: the revision's commit, which the hub names on a missing file (the client caches
        the miss under it); empty for a listing.
        """
        path = None if repo.files is None else repo.files / name
        if path is None or not path.exists():
            message = f"{name or '/'} does not exist in {repo.repo}"
            headers = {"X-Repo-Commit": commit} if commit else {}
            raise Refusal(404, _error("EntryNotFound", message, **headers), message)
        return path

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                self._reply(send_body=True)

            def do_HEAD(self) -> None:  # noqa: N802 (http.server's name)
                self._reply(send_body=False)

            def _reply(self, send_body: bool) -> None:
                authorization = self.headers.get("Authorization", "")
                token = authorization.removeprefix("Bearer ") if authorization.startswith("Bearer ") else None
                status, headers, body = hub.answer(self.command, self.path, token)
                file = body if isinstance(body, Path) else None
                payload = b"" if file else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/octet-stream" if file else "application/json")
                self.send_header("Content-Length", str(file.stat().st_size if file else len(payload)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                if not send_body:
                    return
                if file:
                    with file.open("rb") as stream:
                        shutil.copyfileobj(stream, self.wfile)
                else:
                    self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler


def _tree_entry(path: Path, root: Path) -> dict[str, Any]:
    """One entry of the hub's tree listing: a file with its blob id and size, or a folder."""
    name = path.relative_to(root).as_posix()
    if path.is_dir():
        return {"type": "directory", "oid": hashlib.sha1(name.encode()).hexdigest(), "path": name}
    return {"type": "file", "oid": blob_id(path), "size": path.stat().st_size, "path": name}
