"""Sandboxed execution of model-written Python programs (HumanEval, MBPP, LiveBench coding).

Each program runs in a fresh temporary directory under rlimits, a scrubbed environment and a
fixed hash seed (so printed output is identical from run to run), through a launcher that keeps
it from outliving its timeout, reaching the network or writing outside its directory; how
strongly depends on what the host allows (``Isolation``). ``run`` waits for a program's end;
``converse`` talks with a running program over two extra pipes, so that the caller, not the
program, decides what its run proves. A failure of the sandbox itself raises ``SandboxError``
rather than being scored as a failed program. Linux only.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import math
import os
import queue
import resource
import select
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

from workflow_scripts.evaluate import sandbox_launcher as launcher
from workflow_scripts.evaluate.sandbox_launcher import PROGRAM_NAME

T = TypeVar("T")

MESSAGE_HEADER = struct.Struct(">Q")
REPLY_BYTES = 32 << 20  # the longest reply a caller accepts; a longer one stops the program
# World-writable directories of a Linux system; private (and emptied) in the mount namespace.
PRIVATE_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
# USER_NAMESPACES: hidden under tmpfs, as the program keeps the caller's uid (the home is added).
USER_HIDDEN_DIRS = ("/dev", "/run", "/var/run")
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")
# USER_NAMESPACES: tasks of the program's user namespace that are not the program's: unshare
# (which entered the namespace before forking) and the launcher.
USERNS_SANDBOX_TASKS = 2
PATH = "/usr/local/bin:/usr/bin:/bin"
# Program uids: UID_BASE + (pid << 8) + slot, below 2**32 - 1 for pid_max <= 2**22. Nothing allocates
# uids at or above 2**31 (systemd's conventions avoid them, sssd and container ranges end below), so
# no real user's files can belong to a program.
UID_BASE = 1 << 31
SLOTS_PER_PROCESS = 256
TMPFS_INODES = 4096
READ_CHUNK = 65536
DRAIN_IDLE_S = 0.1  # stop draining output when nothing arrives for this long after the end
TEARDOWN_S = 30.0  # longest wait for the kernel to empty a PID namespace
GROUP_POLL_S = 0.005  # how often a process group is checked for survivors
PROBE_TIMEOUT_S = 30.0
PROBE_PROCESSES = 4
# Run once per isolating mode to confirm it: no network, no capability, no writable /, and a
# process cap that counts the program's own tasks only (the caller's are outside the count).
PROBE_SOURCE = f"""\
import errno, os, socket
try:
    socket.create_connection(("127.0.0.1", 9), 1)
except OSError as exc:
    assert exc.errno == errno.ENETUNREACH, exc
else:
    raise AssertionError("the network is reachable")
status = dict(line.split(":", 1) for line in open("/proc/self/status"))
assert int(status["CapEff"], 16) == 0, "the program holds capabilities"
try:
    open("/sandbox-probe", "x")
except OSError as exc:
    assert exc.errno in (errno.EACCES, errno.EROFS), exc
else:
    raise AssertionError("/ is writable")
read, write = os.pipe()
forks = 0
while forks < {2 * PROBE_PROCESSES}:
    try:
        child = os.fork()
    except BlockingIOError:
        break
    if child == 0:
        os.close(write)
        os.read(read, 1)
        os._exit(0)
    forks += 1
assert forks + 1 == {PROBE_PROCESSES}, (
    f"{{forks + 1}} processes under a cap of {PROBE_PROCESSES}: RLIMIT_NPROC does not count "
    "exactly the sandbox's processes (it binds no root, and before Linux 5.14 counts all the user's)"
)
"""


@dataclass(frozen=True)
class Limits:
    """Resource limits of one program run."""

    timeout_s: float = 6.0  # wall clock; the program's processes are all SIGKILLed after it
    memory_mb: int = 2048  # RLIMIT_AS
    file_size_mb: int = 16  # RLIMIT_FSIZE, and the size of each private tmpfs
    open_files: int = 64  # RLIMIT_NOFILE
    processes: int = 32  # processes and threads (RLIMIT_NPROC of the program's own uid)
    output_bytes: int = 65536  # stdout and stderr each; a program that writes more is killed

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if not value > 0:
                raise ValueError(f"Limits.{field.name} must be positive, got {value!r}")


@dataclass(frozen=True)
class Job:
    """A complete Python program and the text fed to its stdin."""

    source: str
    stdin: str = ""


@dataclass(frozen=True)
class Outcome:
    """How a program ended.

    ``status`` is "passed" (exit 0), "failed" (non-zero exit), "timeout" (killed at
    ``Limits.timeout_s``; ``returncode`` None) or "killed" (ended by a signal, ``returncode`` is
    minus its number, or by writing more than ``Limits.output_bytes``; ``returncode`` None).
    """

    status: str
    returncode: int | None
    stdout: str  # utf-8 with errors="replace", at most Limits.output_bytes bytes
    stderr: str
    seconds: float


class Isolation(enum.Enum):
    """How strongly programs are isolated: the strongest that works (``detect_isolation``).

    Between the caller and the program sits a launcher (``sandbox_launcher.launcher_main``, imported by
    a bare interpreter). It reports its pid and the program's exit status over a pipe, so a program's
    exit code 137 and a death by SIGKILL stay distinct. The program starts with
    ``no_new_privs`` set, so set-user-ID binaries give it nothing. The isolation is detected once per
    process (:func:`detect_isolation`), the strongest that works:

    ``Isolation.NAMESPACES`` (root, util-linux ``unshare``): the launcher is pid 1 of new PID,
    network, mount, IPC and UTS namespaces and runs the program as its child.

    - When the launcher ends (the program exited, or the caller killed the launcher at the timeout)
      the kernel kills every process left in the PID namespace, so a program that calls ``setsid()``
      or double-forks cannot outlive it; the caller waits for that teardown before returning.
    - The network namespace has only a loopback interface, which is down: no connection to anything,
      including the host's 127.0.0.1 and abstract unix sockets.
    - ``/tmp``, ``/var/tmp``, ``/dev/shm``, ``/run/lock`` and the program's directory are private
      tmpfs mounts of ``Limits.file_size_mb`` each: writes there vanish with the namespace and cannot
      fill a disk. The IPC namespace drops System V shared memory with it.
    - The program runs as an unprivileged uid, distinct per concurrent worker slot of this process
      (``2**31 + (pid << 8) + slot``, a range no system allocates). File permissions then stop
      writes and deletes anywhere else, signals cannot reach the caller, and ``RLIMIT_NPROC`` (which
      does not bind root, and counts per uid) bounds the program's processes and threads. A cgroup
      ``pids`` limit was the alternative; it needs a writable, delegated cgroup hierarchy (two
      incompatible versions) and a cgroup to create and remove per run, and it gives no file-system
      protection, so the uid was chosen.
      Interpreter directories under a directory that other users cannot enter (pyenv under
      ``/root``) are bind-mounted read-only into a tmpfs over that directory, which hides the rest.

    ``Isolation.USER_NAMESPACES`` (any other user, util-linux ``unshare``, unprivileged user
    namespaces, Linux >= 5.14): the same namespaces and launcher inside a new user namespace in which
    the caller is mapped to root, so the launcher may mount but the program keeps the caller's uid on
    the host. File permissions protect nothing then, so the launcher makes every mount read-only
    (``mount_setattr``), mounts a fresh ``/proc`` (only the namespace's processes) and a ``/dev``
    holding only ``null``, ``zero``, ``full``, ``random``, ``urandom`` and ``tty``, and hides ``/run``
    (the user's bus, agent and daemon sockets) and the caller's home under tmpfs; the private tmpfs
    mounts, interpreter exposure and teardown are those above. The program runs as uid 0 of the
    namespace with an empty capability bounding set, so it holds no capability. The process cap is
    explained in :func:`rlimits`.

    Memory is bounded per process (RLIMIT_AS), so one program may hold up to ``Limits.processes``
    times ``Limits.memory_mb``; only a cgroup memory limit would bound the sum.

    ``Isolation.PROCESS_GROUP`` (anything else, announced by one ``RuntimeWarning``): a new session
    whose process group is SIGKILLed at the timeout, and the rlimits except the process count.
    :func:`require_isolation` refuses it unless the caller allows running unisolated.
    """

    NAMESPACES = "namespaces"
    USER_NAMESPACES = "user_namespaces"
    PROCESS_GROUP = "process_group"


class SandboxError(RuntimeError):
    """The sandbox itself failed; the program's result is unknown, not wrong."""


class IsolationUnavailable(RuntimeError):
    """Only the process-group fallback works here, and running unisolated was not allowed."""


@dataclass(frozen=True)
class Plan:
    """Everything the launcher needs, passed to it as JSON."""

    status_fd: int
    workdir: str
    argv: list[str]
    env: dict[str, str]
    rlimits: list[tuple[int, int, int]]  # (resource, soft, hard)
    uid: int | None  # None: keep the caller's uid
    tmpfs: list[tuple[str, str]]  # (mount point, tmpfs options), outermost first
    expose: list[str]  # interpreter directories to bind back, read-only, under those mounts
    devices: list[str]  # device nodes to bind into a tmpfs /dev (USER_NAMESPACES)
    sealed: bool  # read-only mounts, a fresh /proc, no capabilities (USER_NAMESPACES)
    call_fds: list[int]  # (messages, replies): the pipe ends the program gets at CALL_FDS; [] for ``run``


def run(job: Job, limits: Limits = Limits(), *, isolation: Isolation | None = None) -> Outcome:
    """Run one program in the sandbox; ``isolation`` defaults to :func:`detect_isolation`."""
    return _execute(job, limits, isolation or detect_isolation())


def run_all(
    jobs: Sequence[Job], limits: Limits = Limits(), workers: int = 2, *, isolation: Isolation | None = None
) -> list[Outcome]:
    """Run programs on ``workers`` threads, each launching one sandboxed process; order preserved."""
    chosen = isolation or detect_isolation()
    return _on_workers(lambda job: _execute(job, limits, chosen), jobs, workers)


class ProgramStopped(Exception):
    """A conversing program can answer no more: ``reason`` is "timeout" (the run's time is up, or
    the caller's deadline for this reply), "output" (it wrote more than ``Limits.output_bytes``),
    "oversized" (a reply over ``REPLY_BYTES``) or "ended" (it exited, or its pipes closed: a
    program that closes them and lives on is stopped by the timeout, as ``unshare`` holds copies)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Channel:
    """The caller's end of a conversing program's pipes (:func:`converse`): one message, one reply.

    ``deadline`` (``time.monotonic()``) is the end of the run, ``Limits.timeout_s`` after its
    start. While a message is written and its reply awaited the program's output and status are
    read and its output cap enforced, as for :func:`run`. Once stopped, it stays stopped.
    """

    def __init__(self, watch: _Watch, deadline: float) -> None:
        self._watch = watch
        self.deadline = deadline
        self.stopped: str | None = None

    def exchange(self, message: bytes, deadline: float | None = None) -> bytes:
        """Send ``message`` and return the program's reply; :class:`ProgramStopped` if none comes
        by ``deadline`` (at most the run's own)."""
        if self.stopped is None:
            until = self.deadline if deadline is None else min(deadline, self.deadline)
            self.stopped = self._watch.exchange(MESSAGE_HEADER.pack(len(message)) + message, until)
        if self.stopped is not None:
            raise ProgramStopped(self.stopped)
        return self._watch.take_reply()


def converse(
    job: Job, talk: Callable[[Channel], T], limits: Limits = Limits(), *, isolation: Isolation | None = None
) -> T:
    """Start ``job``'s program with the call pipes at ``CALL_FDS``, return ``talk(channel)``.

    ``talk`` runs in the caller, while the program runs in the sandbox under ``limits``; once
    it returns (or raises), whatever is left of the program is killed and its directory removed.
    What the program writes to stdout and stderr is read (and capped) but not returned.
    """
    return _converse(job, limits, isolation or detect_isolation(), talk)


def converse_all(
    jobs: Sequence[tuple[Job, Callable[[Channel], T]]],
    limits: Limits = Limits(),
    workers: int = 2,
    *,
    isolation: Isolation | None = None,
) -> list[T]:
    """:func:`converse` with each (job, talk) on ``workers`` threads; order preserved."""
    chosen = isolation or detect_isolation()
    return _on_workers(lambda pair: _converse(pair[0], limits, chosen, pair[1]), jobs, workers)


def _on_workers(function: Callable[[object], T], values: Sequence[object], workers: int) -> list[T]:
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(function, values))


_DETECT_LOCK = threading.Lock()
_DETECTED: list[tuple[Isolation, str]] = []  # (isolation, why the stronger modes are unavailable)


def detect_isolation() -> Isolation:
    """The strongest isolation this machine supports, probed once per process.

    Falling back to ``PROCESS_GROUP`` issues a single ``RuntimeWarning`` naming the reasons and
    what a program can then do.
    """
    return _detected()[0]


def require_isolation(allow_unisolated: bool) -> Isolation:
    """:func:`detect_isolation`, raising :class:`IsolationUnavailable` for the fallback unless allowed.

    Grading runs model-written code; without isolation it runs as the grading user, so a job must
    opt in to that explicitly rather than degrade silently.
    """
    isolation, reasons = _detected()
    if isolation is Isolation.PROCESS_GROUP and not allow_unisolated:
        raise IsolationUnavailable(f"the code sandbox cannot isolate programs here ({reasons})")
    return isolation


def _detected() -> tuple[Isolation, str]:
    if not sys.platform.startswith("linux"):
        raise SandboxError(f"the sandbox needs Linux (namespaces, /proc, prctl), not {sys.platform}")
    with _DETECT_LOCK:
        if not _DETECTED:
            reasons = []
            for isolation in (Isolation.NAMESPACES, Isolation.USER_NAMESPACES):
                reason = unavailable(isolation)
                if not reason:
                    _DETECTED.append((isolation, "; ".join(reasons)))
                    break
                reasons.append(f"{isolation.value}: {reason}")
            else:
                warnings.warn(degraded_message("; ".join(reasons)), RuntimeWarning, stacklevel=3)
                _DETECTED.append((Isolation.PROCESS_GROUP, "; ".join(reasons)))
        return _DETECTED[0]


def unavailable(isolation: Isolation) -> str:
    """Why ``isolation`` cannot be used here ("" when it can), by running a probe program (not cached)."""
    if isolation is Isolation.PROCESS_GROUP:
        return ""
    if isolation is Isolation.NAMESPACES and os.geteuid() != 0:
        return "not running as root"
    if isolation is Isolation.USER_NAMESPACES and os.geteuid() == 0:
        return "RLIMIT_NPROC does not bind root, so root uses namespaces"
    if shutil.which("unshare") is None:
        return "util-linux `unshare` is not on PATH"
    limits = Limits(timeout_s=PROBE_TIMEOUT_S, processes=PROBE_PROCESSES)
    try:
        outcome = _execute(Job(PROBE_SOURCE), limits, isolation)
    except (OSError, SandboxError) as exc:
        return f"the probe failed: {exc}"
    if outcome.status != "passed":
        return f"the probe ended {outcome.status}: {outcome.stderr.strip()[-300:]}"
    return ""


def degraded_message(reason: str) -> str:
    """The warning printed once when programs run without namespaces."""
    return (
        f"sandbox: namespace isolation unavailable ({reason}); programs run in a process group "
        "with rlimits only, as the current user, without PID, network or mount namespaces. "
        "A program can then reach the network, write and delete wherever this user can, start "
        "processes without bound, and outlive its timeout by calling setsid(). Run as root with "
        "util-linux `unshare`, or as a user allowed unprivileged user namespaces (Linux >= 5.14, "
        "sysctl user.max_user_namespaces > 0, and kernel.apparmor_restrict_unprivileged_userns=0 "
        "on Ubuntu >= 23.10), for an isolating sandbox."
    )


_SLOTS: queue.SimpleQueue[int] = queue.SimpleQueue()
for _slot in range(SLOTS_PER_PROCESS):
    _SLOTS.put(_slot)


@contextlib.contextmanager
def _program_dir(job: Job, isolation: Isolation) -> Iterator[tuple[str, int | None]]:
    """A fresh directory holding ``job``'s program and a worker slot's uid; the directory is removed after."""
    slot = _SLOTS.get()
    try:
        workdir = tempfile.mkdtemp(prefix="sandbox-")
        try:
            with open(os.path.join(workdir, PROGRAM_NAME), "w", encoding="utf-8") as program:
                program.write(job.source)
            yield workdir, UID_BASE + (os.getpid() << 8) + slot if isolation is Isolation.NAMESPACES else None
        finally:
            _remove_tree(workdir)
    finally:
        _SLOTS.put(slot)


def _execute(job: Job, limits: Limits, isolation: Isolation) -> Outcome:
    """Run ``job`` to its end."""
    with _program_dir(job, isolation) as (workdir, uid):
        return _launch_and_watch(job, limits, isolation, workdir, uid)


def _converse(job: Job, limits: Limits, isolation: Isolation, talk: Callable[[Channel], T]) -> T:
    """Run ``job`` while ``talk`` converses with it."""
    with _program_dir(job, isolation) as (workdir, uid):
        return _launch_and_talk(job, limits, isolation, workdir, uid, talk)


def program_argv(workdir: str) -> list[str]:
    """The program's command line: this interpreter, isolated but honouring PYTHONHASHSEED.

    ``-s -P -B`` with a replaced environment is ``-I -B`` without ``-E``: ``-E`` would make the
    interpreter ignore ``PYTHONHASHSEED``, and a fixed hash seed keeps set iteration order, and so
    printed output, identical from run to run.
    """
    return [sys.executable, "-s", "-P", "-B", os.path.join(workdir, PROGRAM_NAME)]


def environment(workdir: str) -> dict[str, str]:
    """The program's whole environment; nothing of the caller's leaks in."""
    return {
        "PATH": PATH,
        "LANG": "C.UTF-8",
        "HOME": workdir,
        "TMPDIR": workdir,
        "PYTHONHASHSEED": "0",
        "PYTHONUTF8": "1",
    }


def rlimits(limits: Limits, isolation: Isolation) -> list[tuple[int, int, int]]:
    """(resource, soft, hard) set in the program's process before it starts.

    CPU seconds stop a spinning program a little after the wall-clock timeout would. The process
    count is RLIMIT_NPROC, which the kernel checks at each fork against the tasks of the forking
    task's uid, and which never binds root:

    - ``NAMESPACES``: the uid is the worker slot's own, so the count is the program's processes
      and threads alone.
    - ``USER_NAMESPACES``: the program keeps the caller's uid, whose count on the host includes
      the grader and every concurrent run, so a cap there would either starve honest programs or
      bound nothing. Since Linux 5.14 the count is kept per user namespace (and charged to every
      parent namespace): each run's fresh user namespace counts only its own tasks, that is the
      program's plus ``USERNS_SANDBOX_TASKS``, which the limit adds. A fork bomb is thus bounded
      per run, and the grader, whose own limit is untouched, gains at most ``workers`` times
      ``Limits.processes`` plus those tasks. The probe (:func:`unavailable`) checks the count
      exactly, so an older kernel makes the mode unavailable rather than unbounded. A cgroup
      ``pids`` limit would need a delegated, writable hierarchy, rare for cluster jobs; distinct
      uids would need root or ``newuidmap`` and subordinate uid ranges.
    - ``PROCESS_GROUP``: no process count.
    """
    mib = 1 << 20
    cpu = math.ceil(limits.timeout_s) + 1
    out = [
        (resource.RLIMIT_AS, limits.memory_mb * mib, limits.memory_mb * mib),
        (resource.RLIMIT_CPU, cpu, cpu + 1),
        (resource.RLIMIT_FSIZE, limits.file_size_mb * mib, limits.file_size_mb * mib),
        (resource.RLIMIT_NOFILE, limits.open_files, limits.open_files),
        (resource.RLIMIT_CORE, 0, 0),
    ]
    if isolation is Isolation.NAMESPACES:
        out.append((resource.RLIMIT_NPROC, limits.processes, limits.processes))
    elif isolation is Isolation.USER_NAMESPACES:
        tasks = limits.processes + USERNS_SANDBOX_TASKS
        out.append((resource.RLIMIT_NPROC, tasks, tasks))
    return out


def mount_plan(
    private: Sequence[str], hidden: Sequence[str], interpreter: Sequence[str], size_mb: int
) -> tuple[list[tuple[str, str]], list[str]]:
    """tmpfs mounts (outermost first) and the interpreter directories they would hide.

    ``private`` are world-writable directories (emptied, writable by all, sticky), ``hidden`` are
    directories other users cannot enter that hold the interpreter (emptied, read-only to others).
    """
    private_opts = f"mode=1777,size={size_mb}m,nr_inodes={TMPFS_INODES}"
    mounts = [(d, private_opts) for d in private] + [(d, "mode=0755,size=1m,nr_inodes=256") for d in hidden]
    mounts.sort(key=lambda mount: mount[0].count("/"))
    expose = [d for d in interpreter if any(_within(d, mount) for mount, _ in mounts)]
    return mounts, expose


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _interpreter_dirs() -> list[str]:
    """The directories this interpreter and its packages are loaded from, none inside another."""
    dirs = {
        os.path.realpath(d)
        for d in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)
        + (os.path.dirname(os.path.realpath(sys.executable)),)
    }
    return sorted(d for d in dirs if not any(d != other and _within(d, other) for other in dirs))


def _closed_to_others(path: str) -> str | None:
    """The outermost directory on ``path`` that a user other than its owner cannot enter."""
    current = "/"
    for part in path.strip("/").split("/"):
        current = os.path.join(current, part)
        if not os.stat(current).st_mode & stat.S_IXOTH:
            return current
    return None


def _hidden_dirs(interpreter: Sequence[str], isolation: Isolation) -> list[str]:
    """Directories to replace by a tmpfs: those that keep the program's uid from the interpreter
    (``NAMESPACES``), or those a program keeping the caller's uid must not see (``USER_NAMESPACES``).
    """
    if isolation is Isolation.NAMESPACES:
        return sorted({h for h in map(_closed_to_others, interpreter) if h is not None})
    candidates = {*USER_HIDDEN_DIRS, os.path.realpath(os.path.expanduser("~"))} - {"/"}
    return sorted(d for d in candidates if os.path.isdir(d) and not os.path.islink(d))


def _check_interpreter_visible(mounts: Sequence[tuple[str, str]], expose: Sequence[str]) -> None:
    """Refuse, naming it, an interpreter reached through a directory the sandbox empties.

    The program runs ``sys.executable`` as invoked; a virtual environment under ``/tmp`` (or a
    link to one from there) is found by that path, which the private tmpfs replaces, and the
    launcher would fail with a bare ``FileNotFoundError``.
    """
    command = os.path.abspath(sys.executable)
    for mount, _ in mounts:
        if _within(command, mount) and not any(_within(command, shown) for shown in expose):
            raise SandboxError(
                f"the interpreter {command} lies under {mount}, which the sandbox replaces by an empty "
                "directory: run the pipeline from an environment outside it"
            )


def _plan(
    workdir: str,
    uid: int | None,
    status_fd: int,
    limits: Limits,
    isolation: Isolation,
    call_fds: Sequence[int] = (),
) -> Plan:
    """The launcher's instructions for one run."""
    mounts: list[tuple[str, str]] = []
    expose: list[str] = []
    sealed = isolation is Isolation.USER_NAMESPACES
    if isolation is not Isolation.PROCESS_GROUP:
        interpreter = _interpreter_dirs()
        private = [d for d in PRIVATE_DIRS if os.path.isdir(d) and not os.path.islink(d)]
        mounts, expose = mount_plan(
            private, _hidden_dirs(interpreter, isolation), interpreter, limits.file_size_mb
        )
        _check_interpreter_visible(mounts, expose)
        owner = "" if uid is None else f"uid={uid},gid={uid},"
        mounts.append((workdir, f"mode=0700,{owner}size={limits.file_size_mb}m,nr_inodes={TMPFS_INODES}"))
    return Plan(
        status_fd=status_fd,
        workdir=workdir,
        argv=program_argv(workdir),
        env=environment(workdir),
        rlimits=rlimits(limits, isolation),
        uid=uid,
        tmpfs=mounts,
        expose=expose,
        devices=[d for d in DEVICES if os.path.exists(d)] if sealed else [],
        sealed=sealed,
        call_fds=list(call_fds),
    )


def _launcher_command(plan: Plan, isolation: Isolation) -> list[str]:
    """The launcher's command line: ``sandbox_launcher`` imported by an isolated interpreter without site."""
    launcher_module = launcher.__name__
    package_root = os.path.realpath(launcher.__file__)
    for _ in range(launcher_module.count(".") + 1):
        package_root = os.path.dirname(package_root)
    boot = (
        f"import sys; sys.path.insert(0, {str(package_root)!r}); "
        f"import {launcher_module} as m; m.launcher_main(sys.argv[1])"
    )
    command = [sys.executable, "-I", "-S", "-B", "-c", boot, launcher.encode_plan(dataclasses.asdict(plan))]
    if isolation is Isolation.PROCESS_GROUP:
        return command
    unshare = shutil.which("unshare") or "unshare"
    namespaces = ["--pid", "--fork", "--kill-child", "--net", "--mount", "--ipc", "--uts"]
    if isolation is Isolation.USER_NAMESPACES:
        namespaces = ["--user", "--map-root-user", *namespaces]
    return [unshare, *namespaces, "--propagation", "private", "--", *command]


def _launch(
    job: Job, limits: Limits, isolation: Isolation, workdir: str, uid: int | None, calls: bool
) -> tuple[subprocess.Popen[bytes], int, tuple[int, int] | None, float]:
    """Start the launcher: its process, the status pipe's read end, the caller's ends of the call
    pipes (messages to write, replies to read) if ``calls``, and the start time."""
    status_read, status_write = os.pipe()
    program_ends: tuple[int, ...] = ()
    caller_ends = None
    if calls:
        (message_read, message_write), (reply_read, reply_write) = os.pipe(), os.pipe()
        program_ends, caller_ends = (message_read, reply_write), (message_write, reply_read)
    try:
        plan = _plan(workdir, uid, status_write, limits, isolation, program_ends)
        with tempfile.TemporaryFile() as stdin:
            stdin.write(job.stdin.encode("utf-8"))
            stdin.seek(0)
            start = time.monotonic()
            proc = subprocess.Popen(
                _launcher_command(plan, isolation),
                stdin=stdin,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(status_write, *program_ends),
                start_new_session=True,
                env=plan.env,
                cwd=workdir,
            )
    except BaseException:
        for fd in (status_read, *(caller_ends or ())):
            os.close(fd)
        raise
    finally:
        for fd in (status_write, *program_ends):
            os.close(fd)
    return proc, status_read, caller_ends, start


def _launch_and_watch(
    job: Job, limits: Limits, isolation: Isolation, workdir: str, uid: int | None
) -> Outcome:
    """Start the launcher, read its output and status until the program ends, then clean up."""
    proc, status_read, _, start = _launch(job, limits, isolation, workdir, uid, calls=False)
    namespaced = isolation is not Isolation.PROCESS_GROUP
    with proc, _Watch(proc, status_read, limits.output_bytes, namespaced) as watch:
        stopped = watch.pump(start + limits.timeout_s)
        seconds = time.monotonic() - start
        watch.terminate(kill=stopped is not None)
        watch.drain()
        return watch.outcome(stopped, seconds)


def _launch_and_talk(
    job: Job,
    limits: Limits,
    isolation: Isolation,
    workdir: str,
    uid: int | None,
    talk: Callable[[Channel], T],
) -> T:
    """Start the launcher, let ``talk`` converse with the program, then kill it and clean up.

    A launcher failure raises :class:`SandboxError` even where ``talk`` has returned.
    """
    proc, status_read, call_ends, start = _launch(job, limits, isolation, workdir, uid, calls=True)
    assert call_ends is not None
    namespaced = isolation is not Isolation.PROCESS_GROUP
    with proc, _Watch(proc, status_read, limits.output_bytes, namespaced, call_ends) as watch:
        try:
            result = talk(Channel(watch, start + limits.timeout_s))
        finally:
            watch.terminate(kill=not watch.ended())
            watch.drain()
        watch.raise_launcher_error()
        return result


class _Watch:
    """Reads a launched program's stdout, stderr and status pipe, and writes and reads its call
    pipes if it has them; kills and reaps what it started."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        status_fd: int,
        cap: int,
        namespaced: bool,
        call_fds: tuple[int, int] | None = None,
    ) -> None:
        assert proc.stdout is not None and proc.stderr is not None
        self.proc = proc
        self.namespaced = namespaced
        self.cap = cap
        self.status_fd = status_fd
        self.streams = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
        self.status = bytearray()
        self.poller = select.poll()
        self.message_fd, self.reply_fd = call_fds or (-1, -1)
        self.replies = bytearray()
        self.open = {*self.streams, status_fd} | ({self.reply_fd} if call_fds else set())
        for fd in self.open:
            os.set_blocking(fd, False)
            self.poller.register(fd, select.POLLIN)
        if call_fds:
            os.set_blocking(self.message_fd, False)

    def __enter__(self) -> _Watch:
        return self

    def __exit__(self, *exc: object) -> None:
        for fd in (self.status_fd, self.message_fd, self.reply_fd):
            if fd >= 0:
                os.close(fd)

    def exchange(self, framed: bytes, deadline: float) -> str | None:
        """Write a framed message and read until a whole reply has arrived (None, see
        :meth:`take_reply`); else why the program can answer no more (see :class:`ProgramStopped`)."""
        pending = memoryview(framed)
        broken = False
        self.poller.register(self.message_fd, select.POLLOUT)
        try:
            while self._reply_length() is None:
                if self._oversized():
                    return "oversized"
                if broken or self.reply_fd not in self.open or self._reported():
                    while self.reply_fd in self.open and self._poll(0) and not self._oversized():
                        pass  # what it wrote before it ended
                    return None if self._reply_length() is not None else "ended"
                if self._flooded():
                    return "output"
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return "timeout"
                for fd, events in self.poller.poll(remaining * 1000):
                    if fd != self.message_fd:
                        self._read(fd)
                    elif events & select.POLLOUT and pending:
                        try:
                            pending = pending[os.write(fd, pending) :]
                        except BlockingIOError:
                            continue
                        except BrokenPipeError:
                            broken = True
                        if not pending:
                            self.poller.modify(fd, 0)
                    elif events & (select.POLLERR | select.POLLHUP):
                        broken = True  # the program closed its end
            return None
        finally:
            self.poller.unregister(self.message_fd)

    def take_reply(self) -> bytes:
        """The first whole reply read, removed from the buffer."""
        length = self._reply_length()
        assert length is not None
        end = MESSAGE_HEADER.size + length
        reply = bytes(self.replies[MESSAGE_HEADER.size : end])
        del self.replies[:end]
        return reply

    def ended(self) -> bool:
        """Whether the launcher has reported the program's end."""
        return self._reported()

    def raise_launcher_error(self) -> None:
        """Raise :class:`SandboxError` if the launcher reported a failure of its own."""
        lines = self.status.decode("utf-8", "replace").splitlines()
        errors = [line.removeprefix("error ") for line in lines if line.startswith("error ")]
        if errors:
            err = bytes(list(self.streams.values())[1][: self.cap]).decode("utf-8", "replace")
            raise SandboxError(f"sandbox launcher failed: {errors[0]}; stderr: {err[-500:]}")

    def _reply_length(self) -> int | None:
        if len(self.replies) < MESSAGE_HEADER.size:
            return None
        (length,) = MESSAGE_HEADER.unpack_from(self.replies)
        return length if len(self.replies) >= MESSAGE_HEADER.size + length else None

    def _oversized(self) -> bool:
        if len(self.replies) < MESSAGE_HEADER.size:
            return False
        return MESSAGE_HEADER.unpack_from(self.replies)[0] > REPLY_BYTES

    def pump(self, deadline: float) -> str | None:
        """Read until the launcher reports the program's end; else "timeout" or "output" (flood)."""
        while self.open and not self._reported():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return "timeout"
            self._poll(remaining)
            if self._flooded():
                return "output"
        return None

    def terminate(self, kill: bool) -> None:
        """Stop what is left of the run (all of it if ``kill``) and wait until it is gone.

        Both namespace modes: SIGKILL only the launcher, so that ``unshare`` reaps it; as pid 1
        its exit waits for the kernel to kill everything else in its PID namespace, so once
        ``unshare`` has exited nothing of the program is left. ``PROCESS_GROUP``: SIGKILL the session's
        process group (the launcher, the program and whatever stayed in the group), before
        reaping its leader so that the group id cannot have been reused, and wait until no
        member runs.
        """
        if self.namespaced:
            if kill:
                self._kill_launcher()
            self._wait_reading()
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self._wait_reading()
        deadline = time.monotonic() + TEARDOWN_S
        while _group_runs(self.proc.pid):
            if time.monotonic() > deadline:
                raise SandboxError(f"the sandbox's processes did not end within {TEARDOWN_S} s of SIGKILL")
            time.sleep(GROUP_POLL_S)

    def _wait_reading(self) -> None:
        """Wait for the launched process, reading the pipes meanwhile: ``unshare`` reporting its
        child's death would otherwise block on a stderr pipe the program filled."""
        while self.proc.poll() is None:
            self._poll(GROUP_POLL_S)

    def _kill_launcher(self) -> None:
        """SIGKILL the launcher by the pid it reported, through a pidfd taken while it is unshare's child.

        A launcher that has not reported yet has not started the program: killing the group
        (``unshare`` and the launcher) is then enough.
        """
        if self.status_fd in self.open:
            self._read(self.status_fd)
        first, newline, _ = self.status.partition(b"\n")
        if not (newline and first.startswith(b"pid ")):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            return
        pid = int(first.removeprefix(b"pid "))
        with contextlib.suppress(ProcessLookupError):
            pidfd = os.pidfd_open(pid)
            try:
                if _parent_pid(pid) == self.proc.pid:
                    signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            finally:
                os.close(pidfd)

    def drain(self) -> None:
        """Read what the program left in its pipes, until they close or stay silent."""
        while self.open and self._poll(DRAIN_IDLE_S):
            pass

    def outcome(self, stopped: str | None, seconds: float) -> Outcome:
        """The program's outcome from how it stopped and the launcher's report."""
        self.raise_launcher_error()
        lines = self.status.decode("utf-8", "replace").splitlines()
        out, err = (bytes(buf[: self.cap]).decode("utf-8", "replace") for buf in self.streams.values())
        if stopped == "timeout":
            return Outcome("timeout", None, out, err, seconds)
        if stopped == "output" or self._flooded():
            return Outcome("killed", None, out, err, seconds)
        codes = [int(line.removeprefix("exit ")) for line in lines if line.startswith("exit ")]
        if not codes:
            raise SandboxError(
                f"sandbox launcher ended without a status (exit {self.proc.returncode}); {err[-500:]}"
            )
        code = codes[0]
        status = "passed" if code == 0 else "failed" if code > 0 else "killed"
        return Outcome(status, code, out, err, seconds)

    def _poll(self, seconds: float) -> int:
        """Read every pipe that is ready within ``seconds``; the number that were."""
        ready = [fd for fd, _ in self.poller.poll(seconds * 1000) if fd != self.message_fd]
        for fd in ready:
            self._read(fd)
        return len(ready)

    def _reported(self) -> bool:
        return b"\nexit " in b"\n" + self.status or b"\nerror " in b"\n" + self.status

    def _flooded(self) -> bool:
        return any(len(buf) > self.cap for buf in self.streams.values())

    def _read(self, fd: int) -> None:
        try:
            chunk = os.read(fd, READ_CHUNK)
        except BlockingIOError:
            return
        if not chunk:
            self.poller.unregister(fd)
            self.open.discard(fd)
        elif fd == self.status_fd:
            self.status += chunk
        elif fd == self.reply_fd:
            if len(self.replies) <= MESSAGE_HEADER.size + REPLY_BYTES:
                self.replies += chunk
        else:
            buf = self.streams[fd]
            buf += chunk[: self.cap + 1 - len(buf)]


def _proc_stat(pid: str) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (state, ppid, pgrp, ...)."""
    try:
        with open(f"/proc/{pid}/stat") as stat_file:
            return stat_file.read().rpartition(")")[2].split()
    except (FileNotFoundError, ProcessLookupError):
        return None


def _parent_pid(pid: int) -> int | None:
    fields = _proc_stat(str(pid))
    return None if fields is None else int(fields[1])


def _group_runs(pgid: int) -> bool:
    """Whether a process of group ``pgid`` is still alive (zombies are dead and do not count)."""
    for entry in filter(str.isdigit, os.listdir("/proc")):
        fields = _proc_stat(entry)
        if fields is not None and fields[2] == str(pgid) and fields[0] != "Z":
            return True
    return False


def _remove_tree(path: str) -> None:
    """Delete a program's directory, also where the program took permissions off its subdirectories."""
    for root, dirs, _ in os.walk(path):
        for name in dirs:
            sub = os.path.join(root, name)
            if not os.path.islink(sub):
                with contextlib.suppress(OSError):
                    os.chmod(sub, 0o700)
    shutil.rmtree(path)
