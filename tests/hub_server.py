"""A local stand-in for the Hugging Face hub's API, served over HTTP for ``HF_ENDPOINT``.

``huggingface_hub``'s own client talks to it unchanged, so a test exercises the real requests,
headers and error mapping (``hf_raise_for_status``): the answers carry the hub's status codes and
``X-Error-Code``/``X-Error-Message`` headers for a missing repository or revision, a gated
repository without access and a rejected token. Only the four endpoints preflight reads are
served: a repository's info at a revision, its auth-check, and whoami.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

#: A token the fake hub knows, and the user it belongs to.
TOKEN = "hf_ci_token"
USER = "ci-user"
_INFO = re.compile(r"/api/(models|datasets)/([^/]+/[^/]+)/revision/(.+)")
_AUTH = re.compile(r"/api/(models|datasets)/([^/]+/[^/]+)/auth-check")


def commit_of(repo: str, ref: str = "main") -> str:
    """The stand-in commit a ref of ``repo`` resolves to (40 hex digits, distinct per repository)."""
    return hashlib.sha1(f"{repo}@{ref}".encode()).hexdigest()


@dataclass
class Repo:
    """One repository: its type (``model``/``dataset``), refs and whether it is gated."""

    kind: str
    repo: str
    gated: bool = False
    refs: dict[str, str] = field(default_factory=dict)

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


class HubServer:
    """The stand-in hub on a free local port (``url``) serving ``repos``; ``granted`` read gated ones."""

    def __init__(self, repos: Iterable[Repo], granted: Iterable[str] = (TOKEN,)) -> None:
        self.repos = {(repo.kind, repo.repo): repo for repo in repos}
        self.granted = set(granted)
        self.tokens = {TOKEN: USER} | {token: USER for token in self.granted}
        self.requests: list[tuple[str, str | None]] = []  # (path, token)
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

    def answer(self, path: str, token: str | None) -> tuple[int, dict[str, str], Any]:
        """Status, extra headers and JSON body of a GET of ``path`` with ``token`` (None: anonymous)."""
        self.requests.append((path, token))
        if token is not None and token not in self.tokens:
            message = "Invalid credentials in Authorization header"
            return 401, {"X-Error-Message": message}, {"error": message}
        if path == "/api/whoami-v2":
            if token is None:
                return 401, {}, {"error": "Invalid username or password."}
            return 200, {}, {"type": "user", "name": self.tokens[token], "auth": {"type": "access_token"}}
        if match := _INFO.fullmatch(path):
            kind, name, revision = match[1][:-1], match[2], unquote(match[3])
            repo = self.repos.get((kind, name))
            if repo is None:
                return 404, {"X-Error-Code": "RepoNotFound"}, {"error": "Repository not found"}
            commit = repo.commit(revision)
            if commit is None:
                message = f"Invalid rev id: {revision}"
                return (
                    404,
                    {"X-Error-Code": "RevisionNotFound", "X-Error-Message": message},
                    {"error": message},
                )
            gated = "manual" if repo.gated else False
            return 200, {}, {"_id": commit[:24], "id": name, "sha": commit, "private": False, "gated": gated}
        if match := _AUTH.fullmatch(path):
            kind, name = match[1][:-1], match[2]
            repo = self.repos.get((kind, name))
            if repo is None:
                return 404, {"X-Error-Code": "RepoNotFound"}, {"error": "Repository not found"}
            if repo.gated and token not in self.granted:
                message = (
                    f"Access to {kind} {name} is restricted. You must have access to it and be authenticated."
                )
                return 403, {"X-Error-Code": "GatedRepo", "X-Error-Message": message}, {"error": message}
            return 200, {}, {}
        return 404, {}, {"error": "Not found"}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                authorization = self.headers.get("Authorization", "")
                token = authorization.removeprefix("Bearer ") if authorization.startswith("Bearer ") else None
                status, headers, body = hub.answer(unquote(urlsplit(self.path).path), token)
                payload = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler
