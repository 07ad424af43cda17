"""The sandboxed executor: ordinary programs, limits, and the hostile corpus under tests/hostile/.

Every hostile program runs behind ``PRELUDE``, which names its process after a fresh marker (the
name is inherited through fork), so a survivor shows up in /proc; each run is then checked for
the specific absence of the side effect it attempts, for surviving processes and for its
temporary directory. Properties that need namespace isolation (root and util-linux ``unshare``)
are skipped where the machine lacks it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import resource
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from workflow_scripts.evaluate import sandbox
from workflow_scripts.evaluate.sandbox import Isolation, Job, Limits, Outcome, run, run_all

HOSTILE = Path(__file__).parent / "hostile"
FAST = Limits(timeout_s=2)
PRELUDE = """\
import json as _json, os as _os, sys as _sys
_params = _json.loads(_sys.stdin.readline())
with open("/proc/self/comm", "w") as _comm:
    _comm.write(_params.pop("marker"))
_os.environ.update(_params)
print(_os.getcwd(), flush=True)
"""


@pytest.fixture(scope="module")
def isolation() -> Isolation:
    return sandbox.detect_isolation()


@pytest.fixture()
def namespaces(isolation: Isolation) -> None:
    if isolation is not Isolation.NAMESPACES:
        pytest.skip(
            "needs namespace isolation (root and util-linux unshare); see the sandbox's RuntimeWarning"
        )


@pytest.fixture()
def outside_dir() -> Iterator[Path]:
    """A directory outside /tmp (next to this file) that only its owner, the test's user, may write."""
    path = Path(tempfile.mkdtemp(prefix=".sandbox-outside-", dir=Path(__file__).parent))
    path.chmod(0o755)
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


def run_hostile(name: str, limits: Limits = FAST, **params: str) -> Outcome:
    """Run tests/hostile/<name>.py; check that its directory is gone and none of its processes live."""
    marker = "hx" + uuid.uuid4().hex[:12]
    source = PRELUDE + (HOSTILE / f"{name}.py").read_text()
    outcome = run(Job(source, json.dumps({"marker": marker, **params}) + "\n"), limits)
    workdir = outcome.stdout.split("\n", 1)[0]
    assert os.path.basename(workdir).startswith("sandbox-"), outcome
    assert not os.path.exists(workdir)
    assert marked_processes(marker) == []
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


def test_programs_cannot_gain_privileges():
    source = "print([line for line in open('/proc/self/status') if line.startswith('NoNewPrivs')])\n"
    for isolation in {sandbox.detect_isolation(), Isolation.PROCESS_GROUP}:
        assert run(Job(source), FAST, isolation=isolation).stdout == "['NoNewPrivs:\\t1\\n']\n"


def test_run_all_preserves_order():
    jobs = [Job(f"import time\ntime.sleep({0.05 * (5 - i)})\nprint({i})\n") for i in range(6)]
    outcomes = run_all(jobs, FAST, workers=3)
    assert [o.stdout for o in outcomes] == [f"{i}\n" for i in range(6)]


def test_concurrent_programs_run_as_distinct_unprivileged_uids(namespaces: None):
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


def test_rlimits_bound_processes_only_under_a_uid_of_their_own():
    limits = Limits(timeout_s=2.5, memory_mb=100, file_size_mb=3, open_files=20, processes=7)
    namespaced = {res: (soft, hard) for res, soft, hard in sandbox.rlimits(limits, Isolation.NAMESPACES)}
    grouped = {res: (soft, hard) for res, soft, hard in sandbox.rlimits(limits, Isolation.PROCESS_GROUP)}
    assert namespaced[resource.RLIMIT_AS] == (100 << 20, 100 << 20)
    assert namespaced[resource.RLIMIT_CPU] == (4, 5)
    assert namespaced[resource.RLIMIT_FSIZE] == (3 << 20, 3 << 20)
    assert namespaced[resource.RLIMIT_NOFILE] == (20, 20)
    assert namespaced[resource.RLIMIT_CORE] == (0, 0)
    assert namespaced[resource.RLIMIT_NPROC] == (7, 7)
    assert resource.RLIMIT_NPROC not in grouped
    assert grouped == {res: v for res, v in namespaced.items() if res != resource.RLIMIT_NPROC}


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


def test_missing_root_is_announced_once(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(sandbox, "_DETECTED", [])
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.warns(RuntimeWarning, match=r"not running as root.*setsid"):
        assert sandbox.detect_isolation() is Isolation.PROCESS_GROUP
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert sandbox.detect_isolation() is Isolation.PROCESS_GROUP


def test_missing_unshare_is_announced(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    if os.geteuid() != 0:
        pytest.skip("the unshare check follows the root check")
    monkeypatch.setattr(sandbox, "_DETECTED", [])
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.warns(RuntimeWarning, match="unshare"):
        assert sandbox.detect_isolation() is Isolation.PROCESS_GROUP


def test_process_group_fallback_runs_and_kills():
    passed = run(Job("print(6 * 7)\n"), FAST, isolation=Isolation.PROCESS_GROUP)
    assert (passed.status, passed.stdout) == ("passed", "42\n")
    looping = run(Job("while True:\n    pass\n"), Limits(timeout_s=1), isolation=Isolation.PROCESS_GROUP)
    assert (looping.status, looping.returncode) == ("timeout", None)


# The hostile corpus


def test_fork_bomb_is_bounded_and_leaves_nothing(namespaces: None):
    limits = Limits(timeout_s=2, processes=16)
    outcome = run_hostile("fork_bomb", limits)
    assert outcome.status == "timeout"
    (line,) = lines_starting(outcome, "processes ")
    assert 1 < int(line.split()[1]) <= limits.processes


def test_thread_bomb_is_bounded(namespaces: None):
    limits = Limits(timeout_s=2, processes=16)
    outcome = run_hostile("thread_bomb", limits)
    assert outcome.status == "passed"
    (line,) = lines_starting(outcome, "threads ")
    assert 0 <= int(line.split()[1]) < limits.processes


def test_infinite_loop_times_out():
    outcome = run_hostile("infinite_loop")
    assert (outcome.status, outcome.returncode) == ("timeout", None)
    assert outcome.seconds >= FAST.timeout_s


def test_ignored_sigterm_is_still_killed():
    outcome = run_hostile("ignore_sigterm")
    assert (outcome.status, outcome.returncode) == ("timeout", None)


def test_huge_allocation_fails_inside_the_program():
    outcome = run_hostile("huge_allocation", Limits(timeout_s=5, memory_mb=256))
    assert outcome.status == "failed"
    assert "MemoryError" in outcome.stderr


def test_stdout_flood_is_capped_and_killed_early():
    limits = Limits(timeout_s=5, output_bytes=4096)
    outcome = run_hostile("stdout_flood", limits)
    assert (outcome.status, outcome.returncode) == ("killed", None)
    assert len(outcome.stdout.encode()) == limits.output_bytes
    assert outcome.seconds < limits.timeout_s


def test_filesystem_escape_leaves_no_trace(namespaces: None, outside_dir: Path, tmp_path: Path):
    sentinels = [outside_dir / "sentinel.txt", tmp_path / "sentinel.txt"]
    for sentinel in sentinels:
        sentinel.write_text("original\n")
        sentinel.chmod(0o644)
    before = {s: (s.read_bytes(), s.stat()) for s in sentinels}
    listings = {d: sorted(os.listdir(d)) for d in (outside_dir, tmp_path)}
    name = "escaped-" + uuid.uuid4().hex
    outcome = run_hostile(
        "filesystem_escape",
        SENTINELS=os.pathsep.join(map(str, sentinels)),
        OUTSIDE_DIRS=os.pathsep.join([str(outside_dir), str(tmp_path), str(Path(__file__).parent)]),
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


def test_network_is_unreachable(namespaces: None):
    abstract = "sandbox-test-" + uuid.uuid4().hex
    with (
        socket.create_server(("127.0.0.1", 0)) as tcp,
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as unix,
    ):
        unix.bind("\0" + abstract)
        unix.listen()
        outcome = run_hostile("network_connect", PORT=str(tcp.getsockname()[1]), ABSTRACT=abstract)
        assert outcome.status == "passed", outcome.stderr
        assert (
            len(lines_starting(outcome, "tcp refused"))
            == len(lines_starting(outcome, "abstract unix refused"))
            == 1
        )
        for server in (tcp, unix):
            server.setblocking(False)
            with pytest.raises(BlockingIOError):
                server.accept()


def test_setsid_daemon_dies_with_the_program(namespaces: None, outside_dir: Path):
    outside_dir.chmod(0o777)  # a surviving daemon could write here, whatever its uid
    marker_file = outside_dir / "daemon-was-here"
    sleep_s = 1.0
    outcome = run_hostile("setsid_daemon", MARKER_FILE=str(marker_file), DAEMON_SLEEP=str(sleep_s))
    assert outcome.status == "passed"
    time.sleep(sleep_s + 1.0)
    assert not marker_file.exists()


def test_kill_everything_reaches_only_the_sandbox(namespaces: None):
    bystander = subprocess.Popen(["sleep", "30"])
    try:
        outcome = run_hostile("kill_everything")
        assert outcome.status == "passed", outcome.stderr
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


def test_disk_fill_is_bounded_by_private_tmpfs(namespaces: None):
    limits = Limits(timeout_s=5, file_size_mb=4)
    outcome = run_hostile("disk_fill", limits)
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
