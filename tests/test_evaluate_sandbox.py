"""The sandboxed executor: ordinary programs, limits, detection, and the hostile corpus under tests/hostile/.

Every hostile program runs behind ``PRELUDE``, which names its process after a fresh marker (the
name is inherited through fork), so a survivor shows up in /proc; each run is then checked for
the specific absence of the side effect it attempts, for surviving processes and for its
temporary directory. The corpus runs in every mode that applies here: ``namespaces`` in this
process (root), ``user_namespaces`` in this process (any other user) or, under root, in a child
process as ``UNPRIVILEGED_UID`` (``Mode``), and ``process_group`` for the programs it withstands.
Files, directories and processes the sandbox must protect belong to the user who launches it, so
only the isolation stands in the way. A mode the machine lacks is skipped, naming why.
"""

from __future__ import annotations

import dataclasses
import json
import os
import resource
import shlex
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any
from unittest import mock

import pandas as pd
import pytest

from tests.conftest import ROOT, load_config
from workflow_scripts.cli import main
from workflow_scripts.evaluate import sandbox
from workflow_scripts.evaluate.fixtures import read_fixture
from workflow_scripts.evaluate.items import normalise
from workflow_scripts.evaluate.sandbox import (
    Isolation,
    IsolationUnavailable,
    Job,
    Limits,
    Outcome,
    require_isolation,
    run,
    run_all,
)

HOSTILE = Path(__file__).parent / "hostile"
FAST = Limits(timeout_s=2)
UNPRIVILEGED_UID = 65534  # nobody (and nogroup), who launches the sandbox when these tests run as root
PRELUDE = """\
import json as _json, os as _os, sys as _sys
_params = _json.loads(_sys.stdin.readline())
with open("/proc/self/comm", "w") as _comm:
    _comm.write(_params.pop("marker"))
_os.environ.update(_params)
print(_os.getcwd(), flush=True)
"""
# Run by UNPRIVILEGED_UID: detect the isolation, run jobs in a given one, or converse with one
# job (see ``talk``); JSON in, JSON out.
DRIVER = """\
import dataclasses, json, sys, warnings
sys.path.insert(0, sys.argv[1])
from workflow_scripts.evaluate import sandbox
from tests.test_evaluate_sandbox import talk
request = json.load(sys.stdin)
if "messages" in request:
    isolation = sandbox.Isolation(request["isolation"])
    limits = sandbox.Limits(**request["limits"])
    job = sandbox.Job(**request["job"])
    json.dump(sandbox.converse(job, talk(request["messages"]), limits, isolation=isolation), sys.stdout)
elif request["jobs"] is None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        isolation = sandbox.detect_isolation()
    json.dump({"isolation": isolation.value, "warnings": [str(w.message) for w in caught]}, sys.stdout)
else:
    jobs = [sandbox.Job(**job) for job in request["jobs"]]
    isolation = sandbox.Isolation(request["isolation"])
    outcomes = sandbox.run_all(jobs, sandbox.Limits(**request["limits"]), len(jobs), isolation=isolation)
    json.dump([dataclasses.asdict(outcome) for outcome in outcomes], sys.stdout)
"""


@dataclasses.dataclass(frozen=True)
class Mode:
    """An isolation and who launches it: this process, or a child run through ``prefix`` as ``uid``."""

    isolation: Isolation
    uid: int
    prefix: tuple[str, ...] = ()

    def run_all(self, jobs: Sequence[Job], limits: Limits, home: str | None = None) -> list[Outcome]:
        """Run ``jobs`` at once; ``home``: the launching user's home instead of its own."""
        if not self.prefix:
            with mock.patch.dict(os.environ, {} if home is None else {"HOME": home}):
                return run_all(jobs, limits, workers=len(jobs), isolation=self.isolation)
        request = {
            "jobs": [dataclasses.asdict(job) for job in jobs],
            "limits": dataclasses.asdict(limits),
            "isolation": self.isolation.value,
        }
        return [Outcome(**outcome) for outcome in self.drive(request, home)]

    def converse(self, job: Job, messages: Sequence[str], limits: Limits) -> list[str]:
        """Send ``messages`` to ``job``'s program in turn; its replies (see ``talk``)."""
        if not self.prefix:
            return sandbox.converse(job, talk(messages), limits, isolation=self.isolation)
        request = {
            "job": dataclasses.asdict(job),
            "messages": list(messages),
            "limits": dataclasses.asdict(limits),
            "isolation": self.isolation.value,
        }
        return self.drive(request)

    def drive(self, request: dict[str, Any], home: str | None = None) -> Any:
        """Run ``DRIVER`` on ``request`` through the prefix; its JSON answer."""
        done = subprocess.run(
            [*self.prefix, sys.executable, "-c", DRIVER, str(ROOT)],
            input=json.dumps(request),
            capture_output=True,
            text=True,
            cwd="/",
            env={"PATH": sandbox.PATH, "HOME": home or "/nonexistent", "LANG": "C.UTF-8"},
            timeout=60,
        )
        if done.returncode != 0:
            raise RuntimeError(f"the driver exited {done.returncode}: {done.stderr[-2000:]}")
        return json.loads(done.stdout)

    def popen(self, argv: Sequence[str]) -> subprocess.Popen[bytes]:
        """A process of the launching user, outside the sandbox."""
        return subprocess.Popen([*self.prefix, *argv])


def talk(messages: Sequence[str]) -> Callable[[sandbox.Channel], list[str]]:
    """A conversation sending ``messages`` in turn: each reply, or "stopped: <reason>"."""

    def conversation(channel: sandbox.Channel) -> list[str]:
        replies = []
        for message in messages:
            try:
                replies.append(channel.exchange(message.encode()).decode())
            except sandbox.ProgramStopped as stopped:
                replies.append(f"stopped: {stopped.reason}")
        return replies

    return conversation


def unprivileged_prefix(uid: int, stage: Path) -> tuple[str, ...]:
    """A command prefix that runs as ``uid``, able to reach this interpreter and checkout.

    Directories on the way that other users cannot enter (pyenv under /root) are replaced, in a
    mount namespace of the command's own, by a tmpfs holding only the needed directories.
    """
    needed = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, ROOT)}
    needed.add(os.path.dirname(os.path.realpath(sys.executable)))
    needed = {p for p in needed if not any(p.startswith(other + "/") for other in needed)}
    closed: dict[str, list[str]] = {}
    for path in sorted(needed):
        current = "/"
        for part in Path(path).parts[1:]:
            current = os.path.join(current, part)
            if not os.stat(current).st_mode & stat.S_IXOTH:
                closed.setdefault(current, []).append(path)
                break
    setpriv = ("setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--")
    if not closed:
        return setpriv
    moves = [(path, str(stage / str(index))) for index, path in enumerate(sum(closed.values(), []))]
    moves = [(shlex.quote(path), shlex.quote(staged)) for path, staged in moves]
    script = ["set -e"]
    script += [f"mkdir -p {staged} && mount --rbind {path} {staged}" for path, staged in moves]
    script += [f"mount -t tmpfs -o mode=0755,size=1m tmpfs {shlex.quote(hidden)}" for hidden in closed]
    script += [f"mkdir -p {path} && mount --move {staged} {path}" for path, staged in moves]
    script.append('exec "$@"')
    unshare = ("unshare", "--mount", "--propagation", "private", "sh", "-c", "\n".join(script), "sh")
    return (*unshare, *setpriv)


@pytest.fixture(scope="module")
def modes(tmp_path_factory: pytest.TempPathFactory) -> dict[Isolation, Mode | str]:
    """Every mode: how to run in it here, or why it cannot be."""
    detected = sandbox.detect_isolation()
    uid = os.getuid()
    found: dict[Isolation, Mode | str] = {Isolation.PROCESS_GROUP: Mode(Isolation.PROCESS_GROUP, uid)}
    for isolation in (Isolation.NAMESPACES, Isolation.USER_NAMESPACES):
        found[isolation] = Mode(isolation, uid) if detected is isolation else sandbox.unavailable(isolation)
    if os.geteuid() == 0:
        if not shutil.which("setpriv"):
            found[Isolation.USER_NAMESPACES] = "util-linux setpriv is needed to run as an unprivileged user"
        else:
            prefix = unprivileged_prefix(UNPRIVILEGED_UID, tmp_path_factory.mktemp("stage"))
            user = Mode(Isolation.USER_NAMESPACES, UNPRIVILEGED_UID, prefix)
            try:
                report = user.drive({"jobs": None})
            except RuntimeError as error:
                found[Isolation.USER_NAMESPACES] = f"cannot run as uid {UNPRIVILEGED_UID}: {error}"
            else:
                there, why = report["isolation"], report["warnings"]
                found[Isolation.USER_NAMESPACES] = (
                    user
                    if there == Isolation.USER_NAMESPACES.value
                    else f"as uid {UNPRIVILEGED_UID} the sandbox detects {there}: {why}"
                )
    return found


def _mode(modes: dict[Isolation, Mode | str], isolation: Isolation) -> Mode:
    mode = modes[isolation]
    if isinstance(mode, str):
        pytest.skip(f"{isolation.value} unavailable: {mode}")
    return mode


@pytest.fixture(params=list(Isolation), ids=lambda isolation: isolation.value)
def mode(request: pytest.FixtureRequest, modes: dict[Isolation, Mode | str]) -> Mode:
    """Each mode in turn, for what even the process-group fallback withstands."""
    return _mode(modes, request.param)


@pytest.fixture(
    params=[Isolation.NAMESPACES, Isolation.USER_NAMESPACES], ids=lambda isolation: isolation.value
)
def isolated(request: pytest.FixtureRequest, modes: dict[Isolation, Mode | str]) -> Mode:
    """Each isolating mode in turn."""
    return _mode(modes, request.param)


@pytest.fixture()
def namespaces(modes: dict[Isolation, Mode | str]) -> Mode:
    return _mode(modes, Isolation.NAMESPACES)


def give(path: Path, uid: int) -> None:
    """Hand ``path`` to ``uid`` (a no-op unless root hands it to another user)."""
    if uid != os.getuid():
        os.chown(path, uid, uid)


@pytest.fixture()
def outside_dir(isolated: Mode) -> Iterator[Path]:
    """A directory outside /tmp (next to this file) that only the launching user may write."""
    if not os.access(Path(__file__).parent, os.W_OK):
        pytest.skip(f"needs a directory outside /tmp: {Path(__file__).parent} is not writable by this user")
    path = Path(tempfile.mkdtemp(prefix=".sandbox-outside-", dir=Path(__file__).parent))
    path.chmod(0o755)
    give(path, isolated.uid)
    yield path
    shutil.rmtree(path)


@pytest.fixture()
def tmp_dir(isolated: Mode) -> Iterator[Path]:
    """A directory under the host's temporary directory that only the launching user may write."""
    path = Path(tempfile.mkdtemp(prefix="sandbox-test-"))
    give(path, isolated.uid)
    yield path
    shutil.rmtree(path)


def marked_processes(marker: str) -> list[int]:
    """Live processes whose name is ``marker`` (a zombie is dead, waiting only to be reaped)."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            name = Path("/proc", entry, "comm").read_text().strip()
            state = Path("/proc", entry, "stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if name == marker and state != "Z":
            found.append(int(entry))
    return found


def hostile_job(name: str, **params: str) -> tuple[Job, str]:
    """tests/hostile/<name>.py behind the prelude, and the marker its processes are named after."""
    marker = "hx" + uuid.uuid4().hex[:12]
    source = PRELUDE + (HOSTILE / f"{name}.py").read_text()
    return Job(source, json.dumps({"marker": marker, **params}) + "\n"), marker


def assert_left_nothing(outcome: Outcome, marker: str) -> None:
    """The run's directory is gone and none of its processes live."""
    workdir = outcome.stdout.split("\n", 1)[0]
    assert os.path.basename(workdir).startswith("sandbox-"), outcome
    assert not os.path.exists(workdir)
    assert marked_processes(marker) == []


def run_hostile(mode: Mode, name: str, limits: Limits = FAST, **params: str) -> Outcome:
    """Run tests/hostile/<name>.py in ``mode``; check that it left nothing behind."""
    job, marker = hostile_job(name, **params)
    (outcome,) = mode.run_all([job], limits)
    assert_left_nothing(outcome, marker)
    return outcome


def lines_starting(outcome: Outcome, prefix: str) -> list[str]:
    return [line for line in outcome.stdout.splitlines() if line.startswith(prefix)]


# Ordinary programs


def test_passing_program():
    outcome = run(Job("print('hello')\n"), FAST)
    assert (outcome.status, outcome.returncode, outcome.stdout, outcome.stderr) == (
        "passed",
        0,
        "hello\n",
        "",
    )
    assert 0 < outcome.seconds < FAST.timeout_s


def test_assertion_failure_fails():
    outcome = run(Job("def add(a, b):\n    return a - b\n\nassert add(2, 2) == 4\n"), FAST)
    assert (outcome.status, outcome.returncode) == ("failed", 1)
    assert "AssertionError" in outcome.stderr


def test_syntax_error_fails():
    outcome = run(Job("def f(:\n    pass\n"), FAST)
    assert (outcome.status, outcome.returncode) == ("failed", 1)
    assert "SyntaxError" in outcome.stderr


def test_exit_code_and_signal_death_are_told_apart():
    exited = run(Job("raise SystemExit(137)\n"), FAST)
    signalled = run(Job("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n"), FAST)
    assert (exited.status, exited.returncode) == ("failed", 137)
    assert (signalled.status, signalled.returncode) == ("killed", -9)


def test_stdin_round_trip_then_end_of_file():
    text = "first line\nzweite Zeile: äöü ✓\n"
    source = "import sys\ndata = sys.stdin.read()\nprint(data[::-1], end='')\nprint(repr(sys.stdin.read()))\n"
    outcome = run(Job(source, stdin=text), FAST)
    assert outcome.status == "passed"
    assert outcome.stdout == text[::-1] + "''\n"


def test_output_within_the_cap_is_kept_whole():
    outcome = run(Job("import sys\nsys.stdout.write('a' * 1000)\n"), Limits(timeout_s=2, output_bytes=1000))
    assert (outcome.status, outcome.stdout) == ("passed", "a" * 1000)


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_output_beyond_the_cap_is_truncated_and_killed(stream: str):
    source = f"import sys\nsys.{stream}.write('b' * 5000)\n"
    outcome = run(Job(source), Limits(timeout_s=2, output_bytes=1000))
    assert (outcome.status, outcome.returncode) == ("killed", None)
    assert getattr(outcome, stream) == "b" * 1000


@pytest.mark.parametrize("stream", [1, 2])
@pytest.mark.slow
def test_a_flood_past_the_pipe_buffer_is_killed(mode: Mode, stream: int):
    """Also on stderr, which ``unshare`` shares: its report of the kill must not block the caller."""
    limits = Limits(timeout_s=10, output_bytes=4096)
    start = time.monotonic()
    (outcome,) = mode.run_all([Job(f"import os\nos.write({stream}, b'x' * (1 << 20))\n")], limits)
    assert (outcome.status, outcome.returncode) == ("killed", None)
    assert time.monotonic() - start < limits.timeout_s


def test_environment_is_replaced_and_hashing_is_fixed(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("SANDBOX_LEAK_CHECK", "secret")
    source = "import json, os\nprint(json.dumps(dict(os.environ)))\nprint(hash('abc'))\n"
    first, second = run(Job(source), FAST), run(Job(source), FAST)
    env_line, hash_line = first.stdout.splitlines()
    env = json.loads(env_line)
    assert env == sandbox.environment(env["HOME"])
    assert hash_line == second.stdout.splitlines()[1]


def test_only_standard_streams_are_inherited():
    outcome = run(Job("import os\nprint(sorted(os.listdir('/proc/self/fd')))\n"), FAST)
    assert outcome.stdout == "['0', '1', '2', '3']\n"  # 3: the directory being listed


@pytest.mark.slow
def test_programs_cannot_gain_privileges(mode: Mode):
    source = "print([line for line in open('/proc/self/status') if line.startswith('NoNewPrivs')])\n"
    (outcome,) = mode.run_all([Job(source)], FAST)
    assert outcome.stdout == "['NoNewPrivs:\\t1\\n']\n"


@pytest.mark.slow
def test_isolated_programs_hold_no_capabilities(isolated: Mode):
    held = ("CapInh", "CapPrm", "CapEff", "CapAmb")
    source = f"print([line.split()[1] for line in open('/proc/self/status') if line.startswith({held})])\n"
    (outcome,) = isolated.run_all([Job(source)], FAST)
    assert outcome.stdout == f"{['0' * 16] * len(held)}\n"


def test_run_all_preserves_order():
    jobs = [Job(f"import time\ntime.sleep({0.05 * (5 - i)})\nprint({i})\n") for i in range(6)]
    outcomes = run_all(jobs, FAST, workers=3)
    assert [o.stdout for o in outcomes] == [f"{i}\n" for i in range(6)]


def test_concurrent_programs_run_as_distinct_unprivileged_uids(namespaces: Mode):
    jobs = [Job("import os, time\ntime.sleep(0.5)\nprint(os.getuid())\n")] * 3
    uids = {int(o.stdout) for o in run_all(jobs, FAST, workers=3)}
    assert len(uids) == 3 and all(uid >= sandbox.UID_BASE for uid in uids)


def test_run_all_rejects_no_workers():
    with pytest.raises(ValueError, match="workers"):
        run_all([Job("pass")], FAST, workers=0)


@pytest.mark.parametrize("field", [f.name for f in dataclasses.fields(Limits)])
def test_limits_must_be_positive(field: str):
    with pytest.raises(ValueError, match=f"Limits.{field}"):
        Limits(**{field: 0})


def test_rlimits_bound_processes_only_in_a_count_of_their_own():
    limits = Limits(timeout_s=2.5, memory_mb=100, file_size_mb=3, open_files=20, processes=7)
    by_mode = {
        isolation: {res: (soft, hard) for res, soft, hard in sandbox.rlimits(limits, isolation)}
        for isolation in Isolation
    }
    namespaced = by_mode[Isolation.NAMESPACES]
    assert namespaced[resource.RLIMIT_AS] == (100 << 20, 100 << 20)
    assert namespaced[resource.RLIMIT_CPU] == (4, 5)
    assert namespaced[resource.RLIMIT_FSIZE] == (3 << 20, 3 << 20)
    assert namespaced[resource.RLIMIT_NOFILE] == (20, 20)
    assert namespaced[resource.RLIMIT_CORE] == (0, 0)
    assert namespaced[resource.RLIMIT_NPROC] == (7, 7)
    assert by_mode[Isolation.USER_NAMESPACES][resource.RLIMIT_NPROC] == (9, 9)  # + unshare, launcher
    grouped = by_mode[Isolation.PROCESS_GROUP]
    assert resource.RLIMIT_NPROC not in grouped
    for isolation in (Isolation.USER_NAMESPACES, Isolation.PROCESS_GROUP):
        others = {res: v for res, v in by_mode[isolation].items() if res != resource.RLIMIT_NPROC}
        assert others == {res: v for res, v in namespaced.items() if res != resource.RLIMIT_NPROC}


def test_mount_plan_mounts_outermost_first_and_exposes_hidden_interpreters():
    mounts, expose = sandbox.mount_plan(
        private=["/var/tmp", "/tmp"],
        hidden=["/root"],
        interpreter=["/root/.pyenv/versions/3.11.7", "/opt/venv", "/tmp/venv"],
        size_mb=5,
    )
    assert [m for m, _ in mounts] == ["/tmp", "/root", "/var/tmp"]
    assert dict(mounts)["/tmp"] == f"mode=1777,size=5m,nr_inodes={sandbox.TMPFS_INODES}"
    assert dict(mounts)["/root"].startswith("mode=0755,")
    assert expose == ["/root/.pyenv/versions/3.11.7", "/tmp/venv"]


@pytest.fixture()
def no_isolation(monkeypatch: pytest.MonkeyPatch) -> None:
    """Detection afresh, on a machine where neither namespace mode works."""
    monkeypatch.setattr(sandbox, "_DETECTED", [])
    monkeypatch.setattr(sandbox, "unavailable", lambda isolation: f"no {isolation.value} here")


def test_fallback_is_announced_once_with_every_reason(no_isolation: None):
    reasons = r"namespaces: no namespaces here; user_namespaces: no user_namespaces here"
    with pytest.warns(RuntimeWarning, match=rf"\({reasons}\).*setsid"):
        assert sandbox.detect_isolation() is Isolation.PROCESS_GROUP
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert sandbox.detect_isolation() is Isolation.PROCESS_GROUP


def test_unisolated_running_is_refused_unless_allowed(no_isolation: None):
    with pytest.warns(RuntimeWarning), pytest.raises(IsolationUnavailable, match="no user_namespaces here"):
        require_isolation(allow_unisolated=False)
    assert require_isolation(allow_unisolated=True) is Isolation.PROCESS_GROUP


def test_score_refuses_unisolated_code_naming_the_key(
    no_isolation: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    spec = load_config(toy=True)["benchmarks"]["humaneval"]
    items = normalise("humaneval", read_fixture("humaneval"), spec, 42).head(1)
    meta = json.loads(items["metadata"].iloc[0])
    response = f"```python\n{meta['prompt']}{meta['canonical_solution']}\n```\n"
    generations = pd.DataFrame(
        {"benchmark": ["humaneval"], "item_id": items["item_id"], "repeat": [0], "seed": [42],
         "response": [response], "completion_tokens": [1], "finish_reason": ["stop"]}
    )  # fmt: skip
    items.to_parquet(tmp_path / "items.parquet")
    generations.to_parquet(tmp_path / "generations.parquet")

    def score(allow_unisolated: bool) -> int:
        limits = {"timeout_s": 5, "memory_mb": 1024, "allow_unisolated": allow_unisolated}
        return main([
            "evaluate", "score", "--items", str(tmp_path / "items.parquet"),
            "--generations", str(tmp_path / "generations.parquet"), "--repeats", "1",
            "--limits", json.dumps(limits), "--identity", "{}", "--workers", "1",
            "--scores", str(tmp_path / "scores.parquet"), "--summary", str(tmp_path / "summary.json"),
        ])  # fmt: skip

    with pytest.warns(RuntimeWarning, match="namespace isolation unavailable"):
        assert score(allow_unisolated=False) == 2
    assert "set evaluation.sandbox.allow_unisolated: true" in capsys.readouterr().err
    assert not (tmp_path / "summary.json").exists()
    monkeypatch.setattr(sandbox, "_DETECTED", [])
    with pytest.warns(RuntimeWarning, match="namespace isolation unavailable"):
        assert score(allow_unisolated=True) == 0
    assert json.loads((tmp_path / "summary.json").read_text())["benchmarks"]["humaneval"]["score"] == 100


def test_root_prefers_namespaces_and_never_user_namespaces():
    if os.geteuid() != 0:
        pytest.skip("checks what root may use")
    assert "does not bind root" in sandbox.unavailable(Isolation.USER_NAMESPACES)


def test_missing_unshare_is_announced(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setattr(sandbox, "_DETECTED", [])
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.warns(RuntimeWarning, match="unshare"):
        assert sandbox.detect_isolation() is Isolation.PROCESS_GROUP


@pytest.mark.slow
def test_the_home_is_hidden_but_an_interpreter_inside_stays(modes: dict[Isolation, Mode | str]):
    user = _mode(modes, Isolation.USER_NAMESPACES)
    home = os.path.dirname(os.path.realpath(sys.prefix))
    if home == "/":
        pytest.skip(f"this interpreter's prefix {sys.prefix} is a top-level directory")
    interpreter = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.executable)}
    inside = sorted({Path(p).relative_to(home).parts[0] for p in interpreter if p.startswith(home + "/")})
    (outcome,) = user.run_all([Job(f"import os\nprint(sorted(os.listdir({home!r})))\n")], FAST, home=home)
    assert (outcome.status, outcome.stdout) == ("passed", f"{inside}\n"), outcome.stderr


@pytest.mark.slow
def test_process_group_fallback_runs_and_kills():
    passed = run(Job("print(6 * 7)\n"), FAST, isolation=Isolation.PROCESS_GROUP)
    assert (passed.status, passed.stdout) == ("passed", "42\n")
    looping = run(Job("while True:\n    pass\n"), Limits(timeout_s=1), isolation=Isolation.PROCESS_GROUP)
    assert (looping.status, looping.returncode) == ("timeout", None)


# Conversations

# Answers each message on the call pipes: "fds" its open descriptors, "exit" exits 3, "hang" spins,
# "flood" writes 1 MiB to stderr, "huge" announces a reply over REPLY_BYTES, "close" closes its
# pipes and sleeps LINGER_S seconds; anything else comes back reversed.
LINGER_S = 120
RESPONDER = f"""\
import os, struct, sys, time
HEADER = struct.Struct(">Q")
def read(size):
    data = b""
    while len(data) < size:
        chunk = os.read(3, size - len(data))
        if not chunk:
            sys.exit(0)
        data += chunk
    return data
while True:
    message = read(HEADER.unpack(read(8))[0])
    if message == b"fds":
        message = repr(sorted(int(fd) for fd in os.listdir("/proc/self/fd"))[:-1]).encode()[::-1]
    elif message == b"exit":
        os._exit(3)
    elif message == b"hang":
        while True:
            pass
    elif message == b"flood":
        os.write(2, b"x" * (1 << 20))
    elif message == b"huge":
        os.write(4, HEADER.pack({sandbox.REPLY_BYTES + 1}) + b"partial")
    elif message == b"close":
        os.close(3)
        os.close(4)
        time.sleep({LINGER_S})
    reply = message[::-1]
    view = memoryview(HEADER.pack(len(reply)) + reply)
    while view:
        view = view[os.write(4, view):]
"""


@pytest.mark.slow
def test_a_conversation_exchanges_messages_in_every_mode(mode: Mode):
    """Messages larger than a pipe's buffer both ways; only the call pipes besides the standard streams."""
    big = "ab" * 200_000
    replies = mode.converse(Job(RESPONDER), ["hello", "fds", big, "world"], FAST)
    assert replies == ["olleh", "[0, 1, 2, 3, 4]", big[::-1], "dlrow"]


@pytest.mark.parametrize(
    ("messages", "stopped"),
    [(["exit", "hello"], "ended"), (["close", "hello"], "timeout"), (["hang", "hello"], "timeout"),
     (["flood", "hello"], "output"), (["huge", "hello"], "oversized")],
)  # fmt: skip
@pytest.mark.slow
def test_a_conversation_stops_for_good(mode: Mode, messages: list[str], stopped: str):
    """A program that closes its pipes but lives on hangs where ``unshare`` holds copies of them."""
    if messages[0] == "close" and mode.isolation is Isolation.PROCESS_GROUP:
        stopped = "ended"
    limits = Limits(timeout_s=1.5, output_bytes=4096)
    start = time.monotonic()
    assert (
        mode.converse(Job(RESPONDER), ["first", *messages], limits) == ["tsrif"] + [f"stopped: {stopped}"] * 2
    )
    assert time.monotonic() - start < LINGER_S / 4  # a loaded machine's slack, far from a lingering responder


@pytest.mark.parametrize("name", ["kill_everything", "setsid_daemon", "fork_bomb"])
@pytest.mark.slow
def test_conversing_hostile_programs_stay_contained(isolated: Mode, outside_dir: Path, name: str):
    """A conversation is a run like any other: nothing outlives it or reaches the launching user."""
    outside_dir.chmod(0o777)
    marker_file = outside_dir / "daemon-was-here"
    job, marker = hostile_job(name, MARKER_FILE=str(marker_file), DAEMON_SLEEP="0.5")
    bystander = isolated.popen(["sleep", "30"])
    try:
        limits = Limits(timeout_s=2, processes=16)
        assert isolated.converse(job, ["anyone there?"], limits)[0] in ("stopped: ended", "stopped: timeout")
        assert marked_processes(marker) == []
        assert bystander.poll() is None
        time.sleep(1.0)
        assert not marker_file.exists()
    finally:
        bystander.kill()
        bystander.wait()


# The hostile corpus


@pytest.mark.slow
def test_fork_bomb_is_bounded_and_leaves_nothing(isolated: Mode):
    limits = Limits(timeout_s=2, processes=16)
    outcome = run_hostile(isolated, "fork_bomb", limits)
    assert outcome.status == "timeout"
    (line,) = lines_starting(outcome, "processes ")
    assert 1 < int(line.split()[1]) <= limits.processes


@pytest.mark.slow
def test_fork_bomb_leaves_room_for_a_concurrent_program(isolated: Mode):
    """The process cap counts each run alone: a bomb at its cap starves no neighbour."""
    limits = Limits(timeout_s=2, processes=16)
    bomb, marker = hostile_job("fork_bomb")
    neighbour = (
        "import os, time\ntime.sleep(0.5)\nchildren = []\nfor _ in range(12):\n"
        "    child = os.fork()\n    if child == 0:\n        os._exit(0)\n    children.append(child)\n"
        "for child in children:\n    os.waitpid(child, 0)\nprint(len(children))\n"
    )
    bombed, spared = isolated.run_all([bomb, Job(neighbour)], limits)
    assert_left_nothing(bombed, marker)
    assert (bombed.status, spared.status, spared.stdout) == ("timeout", "passed", "12\n"), spared.stderr


@pytest.mark.slow
def test_thread_bomb_is_bounded(isolated: Mode):
    limits = Limits(timeout_s=2, processes=16)
    outcome = run_hostile(isolated, "thread_bomb", limits)
    assert outcome.status == "passed"
    (line,) = lines_starting(outcome, "threads ")
    assert 0 <= int(line.split()[1]) < limits.processes


@pytest.mark.slow
def test_infinite_loop_times_out(mode: Mode):
    limits = Limits(timeout_s=1)
    outcome = run_hostile(mode, "infinite_loop", limits)
    assert (outcome.status, outcome.returncode) == ("timeout", None)
    assert outcome.seconds >= limits.timeout_s


@pytest.mark.slow
def test_ignored_sigterm_is_still_killed(mode: Mode):
    outcome = run_hostile(mode, "ignore_sigterm", Limits(timeout_s=1))
    assert (outcome.status, outcome.returncode) == ("timeout", None)


@pytest.mark.slow
def test_huge_allocation_fails_inside_the_program(mode: Mode):
    outcome = run_hostile(mode, "huge_allocation", Limits(timeout_s=5, memory_mb=256))
    assert outcome.status == "failed"
    assert "MemoryError" in outcome.stderr


def test_stdout_flood_is_capped_and_killed_early(mode: Mode):
    limits = Limits(timeout_s=5, output_bytes=4096)
    outcome = run_hostile(mode, "stdout_flood", limits)
    assert (outcome.status, outcome.returncode) == ("killed", None)
    assert len(outcome.stdout.encode()) == limits.output_bytes
    assert outcome.seconds < limits.timeout_s


@pytest.mark.slow
def test_filesystem_escape_leaves_no_trace(isolated: Mode, outside_dir: Path, tmp_dir: Path):
    sentinels = [outside_dir / "sentinel.txt", tmp_dir / "sentinel.txt"]
    for sentinel in sentinels:
        sentinel.write_text("original\n")
        sentinel.chmod(0o644)
        give(sentinel, isolated.uid)
    before = {s: (s.read_bytes(), s.stat()) for s in sentinels}
    listings = {d: sorted(os.listdir(d)) for d in (outside_dir, tmp_dir)}
    name = "escaped-" + uuid.uuid4().hex
    outcome = run_hostile(
        isolated,
        "filesystem_escape",
        SENTINELS=os.pathsep.join(map(str, sentinels)),
        OUTSIDE_DIRS=os.pathsep.join([str(outside_dir), str(tmp_dir), str(Path(__file__).parent)]),
        NAME=name,
    )
    assert outcome.status == "passed", outcome.stderr
    for sentinel, (content, info) in before.items():
        assert sentinel.exists(), f"{sentinel} was removed or renamed"
        after = sentinel.stat()
        assert sentinel.read_bytes() == content
        assert (after.st_mode, after.st_mtime_ns, after.st_uid) == (
            info.st_mode,
            info.st_mtime_ns,
            info.st_uid,
        )
    assert {d: sorted(os.listdir(d)) for d in listings} == listings
    for directory in ("/tmp", "/var/tmp", "/dev/shm", str(Path(__file__).parent)):
        assert not [entry for entry in os.listdir(directory) if entry.startswith(name)]


@pytest.fixture()
def run_dir(isolated: Mode) -> Iterator[Path]:
    """Where daemons listen, only the launching user may enter: under /run as root, else in the user's
    runtime directory (if any, else the temporary directory)."""
    parent = "/run" if os.geteuid() == 0 else os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    path = Path(tempfile.mkdtemp(prefix="sandbox-test-", dir=parent))
    give(path, isolated.uid)
    yield path
    shutil.rmtree(path)


@pytest.mark.slow
def test_network_is_unreachable(isolated: Mode, run_dir: Path):
    abstract = "sandbox-test-" + uuid.uuid4().hex
    with (
        socket.create_server(("127.0.0.1", 0)) as tcp,
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as unix,
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as unix_file,
    ):
        unix.bind("\0" + abstract)
        unix.listen()
        unix_file.bind(str(run_dir / "socket"))
        unix_file.listen()
        give(run_dir / "socket", isolated.uid)
        outcome = run_hostile(
            isolated,
            "network_connect",
            PORT=str(tcp.getsockname()[1]),
            ABSTRACT=abstract,
            SOCKET=str(run_dir / "socket"),
        )
        assert outcome.status == "passed", outcome.stderr
        for label in ("tcp", "abstract unix", "unix file"):
            assert len(lines_starting(outcome, f"{label} refused")) == 1, outcome.stdout
        for server in (tcp, unix, unix_file):
            server.setblocking(False)
            with pytest.raises(BlockingIOError):
                server.accept()


@pytest.mark.slow
def test_setsid_daemon_dies_with_the_program(isolated: Mode, outside_dir: Path):
    outside_dir.chmod(0o777)  # a surviving daemon could write here, whatever its uid
    marker_file = outside_dir / "daemon-was-here"
    sleep_s = 0.5
    outcome = run_hostile(isolated, "setsid_daemon", MARKER_FILE=str(marker_file), DAEMON_SLEEP=str(sleep_s))
    assert outcome.status == "passed"
    time.sleep(sleep_s + 0.5)
    assert not marker_file.exists()


@pytest.mark.slow
def test_kill_everything_reaches_only_the_sandbox(isolated: Mode):
    bystander = isolated.popen(["sleep", "30"])  # the launching user's, so kill -1 outside would reach it
    try:
        outcome = run_hostile(isolated, "kill_everything")
        assert outcome.status == "passed", outcome.stderr
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


def test_disk_fill_is_bounded_by_private_tmpfs(isolated: Mode):
    limits = Limits(timeout_s=5, file_size_mb=4)
    outcome = run_hostile(isolated, "disk_fill", limits)
    assert outcome.status == "passed", outcome.stderr
    written = dict(line.rsplit(" ", 1) for line in outcome.stdout.splitlines()[1:])
    assert len(written) == 3
    assert all(0 < int(n) <= limits.file_size_mb << 20 for n in written.values())


def test_hostile_corpus_is_complete():
    """Every program in tests/hostile/ is exercised above and says what it attempts."""
    names = {p.stem for p in HOSTILE.glob("*.py")}
    tested = {
        "fork_bomb",
        "thread_bomb",
        "infinite_loop",
        "ignore_sigterm",
        "huge_allocation",
        "stdout_flood",
        "filesystem_escape",
        "network_connect",
        "setsid_daemon",
        "kill_everything",
        "disk_fill",
    }
    assert names == tested
    for path in HOSTILE.glob("*.py"):
        assert path.read_text().startswith('"""'), path


def test_an_interpreter_reached_through_a_private_directory_is_named(namespaces: Mode, tmp_path: Path):
    """A venv linked from under /tmp is run by its /tmp path, which the sandbox empties.

    The launcher once failed with a bare FileNotFoundError; the refusal names the interpreter and
    the directory that hides it, before any program starts.
    """
    link = tmp_path / "linked-env"
    link.symlink_to(sys.prefix, target_is_directory=True)
    python = link / "bin" / "python"
    script = (
        "from workflow_scripts.evaluate import sandbox\n"
        "sandbox.run(sandbox.Job('print(1)'), isolation=sandbox.Isolation.NAMESPACES)\n"
    )
    done = subprocess.run([str(python), "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode != 0
    assert f"the interpreter {python} lies under /tmp, which the sandbox replaces" in done.stderr
