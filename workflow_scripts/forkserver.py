"""A fork server that keeps torch and transformers imported between local jobs.

At toy scale a job's real work takes about a second while a fresh interpreter spends six to
nine seconds importing torch, transformers and the model modules; with hundreds of jobs that
start-up dominates. The server imports everything once, and each job's ``python -m
workflow_scripts ...`` hands it argv, cwd, environment and streams over a Unix socket to run
in a forked child (``Server``). Optional and local only: without it a command runs in-process.

    python -m workflow_scripts.forkserver --socket /tmp/rpb.sock --parent PID
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import runpy
import selectors
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

SOCKET_VARIABLE = "RPB_FORK_SERVER"
REFUSED = -1  # exit status meaning "run it yourself" (the job's interpreter differs from the server's)
_LENGTH = struct.Struct("!I")
_STATUS = struct.Struct("!i")
_STREAMS = (0, 1, 2)
_STOPPING = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}  # Ctrl-C, stop(), a closed terminal
# Heavy imports every torch job would otherwise repeat; project modules import lazily inside commands.
PRELOAD = (
    "numpy",
    "pandas",
    "pyarrow.parquet",
    "torch",
    "transformers",
    "networkx",
    "igraph",
    "leidenalg",
    "scipy.ndimage",
    "workflow_scripts.cli",
    "workflow_scripts.modeling.toy",
    "workflow_scripts.routing.hf",
    "workflow_scripts.modeling.loop",
    "workflow_scripts.priors.compute",
    "workflow_scripts.probe.routes",
    "workflow_scripts.probe.analysis",
    "workflow_scripts.evaluate.generation",
    "workflow_scripts.evaluate.grading",
    "workflow_scripts.evaluate.math_equivalence",
    "workflow_scripts.evaluate.livebench.scoring",
    "workflow_scripts.report.figures",
    "workflow_scripts.report.claims",
)


def _interpreter() -> dict[str, str | None]:
    """What must match for a job to run in this server: the interpreter, this package's copy and
    the SLURM allocation (None outside SLURM), so that a SLURM job never runs in a server outside it.
    """
    return {
        "prefix": sys.prefix,
        "version": sys.version,
        "package": os.path.dirname(os.path.abspath(__file__)),
        "slurm_job": os.environ.get("SLURM_JOB_ID"),
    }


# --- client side: stays free of heavy imports, it runs before every forwarded job ----------------


def _receive_exactly(connection: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the fork server closed the connection")
        data += chunk
    return data


def forward(socket_path: str, module: str, argv: Sequence[str]) -> int | None:
    """Run ``python -m <module> <argv>`` in the fork server; its exit status, or None to run it here.

    None when no server listens at ``socket_path`` or it serves another interpreter.
    """
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect(socket_path)
    except OSError:
        connection.close()
        return None
    with connection:
        request = {
            "module": module,
            "argv": list(argv),
            "cwd": os.getcwd(),
            "env": dict(os.environ),
            **_interpreter(),
        }
        payload = json.dumps(request).encode()
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        try:
            socket.send_fds(connection, [_LENGTH.pack(len(payload))], list(_STREAMS))
            connection.sendall(payload)
        except OSError:
            return None
        try:
            (status,) = _STATUS.unpack(_receive_exactly(connection, _STATUS.size))
        except ConnectionError as error:
            print(f"error: {error} before the job finished", file=sys.stderr)
            return 1
    return None if status == REFUSED else status


# --- server side -----------------------------------------------------------------------------------


def _preload() -> None:
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    from workflow_scripts.routing.hf import _router_classes

    # Every stage's command-line module, which each job's parser imports (PRELOAD's entry point).
    importlib.import_module("workflow_scripts.cli").build_parser()
    _router_classes()  # the three architectures' transformers modules
    # A process's first from_pretrained builds transformers' table of weight renamings for every
    # model family (thousands of regexes, 0.4 s); built here, each job that loads a model inherits it.
    from transformers.conversion_mapping import get_checkpoint_conversion_mapping

    get_checkpoint_conversion_mapping("deepseek_v3")


def _run_child(request: dict, streams: list[int], closing: Sequence[int]) -> None:
    """In the forked child: become the job (streams, cwd, environment), run it, exit with its status."""
    status = 1
    try:
        os.setpgid(0, 0)  # one group per job: killing it reaches the job's own subprocesses
        server = os.getppid()
        signal.set_wakeup_fd(-1)
        for number in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
            signal.signal(number, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for descriptor in closing:
            os.close(descriptor)
        job = os.fork()
        if job != 0:
            _guard_group(job, server, streams)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOPPING)  # blocked by the server across the fork
        for target, descriptor in zip(_STREAMS, streams, strict=True):
            os.dup2(descriptor, target)
            os.close(descriptor)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        os.environ.pop(SOCKET_VARIABLE, None)  # the job runs here; what it starts runs on its own
        if threads := os.environ.get("OMP_NUM_THREADS"):
            import torch

            torch.set_num_threads(int(threads))
        sys.argv = [request["module"], *request["argv"]]
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        status = 0
    except SystemExit as done:
        status = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os._exit(status)


_GUARD_POLL_S = 0.1


def _guard_group(job: int, server: int, streams: Sequence[int]) -> NoReturn:
    """The job's group leader: wait for the job, and kill the whole group if the server ends first.

    ``kill -9`` of Snakemake's process group kills the client and the server but not a job, which
    runs in a group of its own; without this it would go on (and write its outputs) after the
    run was killed, racing a rerun. The leader exits with the job's status.
    """
    for descriptor in streams:
        os.close(descriptor)
    while True:
        finished, wait_status = os.waitpid(job, os.WNOHANG)
        if finished:
            os._exit(_exit_status(wait_status))
        if os.getppid() != server:
            os.killpg(0, signal.SIGKILL)
        time.sleep(_GUARD_POLL_S)


def _exit_status(wait_status: int) -> int:
    """A shell's exit status for a wait status: the code, or 128 + the signal that killed it."""
    if os.WIFSIGNALED(wait_status):
        return 128 + os.WTERMSIG(wait_status)
    return os.waitstatus_to_exitcode(wait_status)


class Server:
    """Accept jobs on a listening Unix socket and fork one child per job.

    Each child runs the command exactly as a fresh process would (the same module run as
    ``__main__``, with the job's own streams, cwd and environment) and its exit status goes back
    to the client. A job is still one Snakemake job: killing the client (Ctrl-C, ``kill -9``, a timeout)
    closes its socket and the server kills the child's whole process group at once, so an
    interrupted job leaves exactly what an interrupted fresh process leaves. Children are
    forked from a server that has never run a job, so no state passes between jobs; every
    job seeds its own random generators, as it must anyway.

    The server is optional and local only: without it (no socket, another interpreter, a
    cluster node) the command runs in-process. A SLURM job is refused even where it reaches the
    socket (a one-machine cluster, a shared ``/tmp``; the executor plugin exports the submitting
    shell's ``RPB_FORK_SERVER``): it must run inside its own allocation. The server logs every job
    it serves or refuses. It exits when the process that started it (Snakemake) ends, or when told
    to stop.
    """

    def __init__(self, listener: socket.socket, parent: int) -> None:
        self.listener = listener
        self.parent = parent
        self.jobs: dict[int, socket.socket] = {}  # child pid -> its client's connection
        self.selector = selectors.DefaultSelector()
        wake_read, wake_write = os.pipe()
        os.set_blocking(wake_read, False)
        os.set_blocking(wake_write, False)
        self.wake_read, self.wake_write = wake_read, wake_write
        signal.set_wakeup_fd(wake_write)  # SIGCHLD wakes the select loop at once
        signal.signal(signal.SIGCHLD, lambda *_: None)
        self.selector.register(listener, selectors.EVENT_READ)
        self.selector.register(wake_read, selectors.EVENT_READ)

    def serve(self) -> None:
        while os.getppid() == self.parent:
            for key, _ in self.selector.select(timeout=1.0):
                if key.fileobj is self.listener:
                    self._accept()
                elif key.fileobj == self.wake_read:
                    _drain(self.wake_read)
                else:
                    self._client_gone(key.fileobj)
            self._reap()
        self.stop()

    def _accept(self) -> None:
        connection, _ = self.listener.accept()
        connection.settimeout(30)
        try:
            message, streams, _, _ = socket.recv_fds(connection, _LENGTH.size, len(_STREAMS))
            (length,) = _LENGTH.unpack(message)
            request = json.loads(_receive_exactly(connection, length))
        except (OSError, ValueError, struct.error):
            connection.close()
            return
        differing = [key for key, value in _interpreter().items() if request.get(key) != value]
        if len(streams) != len(_STREAMS) or differing:
            for descriptor in streams:
                os.close(descriptor)
            connection.sendall(_STATUS.pack(REFUSED))
            connection.close()
            mismatch = ", ".join(f"{key} {request.get(key)!r}" for key in differing) or "streams"
            _log(f"refused {_describe(request)}: {mismatch}")
            return
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        closing = [self.listener.fileno(), self.wake_read, self.wake_write, connection.fileno()]
        closing += [job.fileno() for job in self.jobs.values()]
        signal.pthread_sigmask(signal.SIG_BLOCK, _STOPPING)  # the child must not run the server's exit
        pid = os.fork()
        if pid == 0:
            _run_child(request, streams, closing)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOPPING)
        for descriptor in streams:
            os.close(descriptor)
        _log(f"served {_describe(request)} as pid {pid}")
        self.jobs[pid] = connection
        self.selector.register(connection, selectors.EVENT_READ)

    def _client_gone(self, connection: socket.socket) -> None:
        """A client's socket became readable: it sends nothing after its request, so it has ended."""
        self.selector.unregister(connection)
        for pid, job in self.jobs.items():
            if job is connection:
                _kill_group(pid)
                break

    def _reap(self) -> None:
        for pid, connection in list(self.jobs.items()):
            finished, wait_status = os.waitpid(pid, os.WNOHANG)
            if not finished:
                continue
            _kill_group(pid)  # anything the job left running in its group
            del self.jobs[pid]
            if connection.fileno() in self.selector.get_map():
                self.selector.unregister(connection)
            try:
                connection.sendall(_STATUS.pack(_exit_status(wait_status)))
            except OSError:
                pass
            connection.close()

    def stop(self) -> None:
        for pid in self.jobs:
            _kill_group(pid)
        for pid in self.jobs:
            os.waitpid(pid, 0)
        self.jobs.clear()


def _describe(request: dict) -> str:
    """A job's command line for the server's log."""
    return " ".join(["python -m", str(request.get("module")), *map(str, request.get("argv", [])[:2])])


def _log(line: str) -> None:
    """One line on the server's standard output (its log file): which jobs it served or refused."""
    print(f"{time.strftime('%H:%M:%S')} {line}", flush=True)


def _drain(descriptor: int) -> None:
    """Empty the non-blocking wake-up pipe (its bytes only say that a signal arrived)."""
    try:
        while os.read(descriptor, 512):
            pass
    except BlockingIOError:
        pass


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


_STALE_AFTER_S = 60  # a socket younger than this may belong to a server between bind and listen


def remove_stale(socket_path: str | os.PathLike) -> bool:
    """Remove ``socket_path`` if it is a socket no process listens at; whether it did.

    A server killed outright (SIGKILL, a crash) cannot remove its socket; a later start does.
    Raises ``RuntimeError`` when a server does listen there.
    """
    path = Path(socket_path)
    if not path.is_socket():
        return False
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
    except ConnectionRefusedError:
        path.unlink(missing_ok=True)
        return True
    finally:
        probe.close()
    raise RuntimeError(f"a fork server already listens at {path}")


def _remove_stale_servers(folder: str) -> None:
    """Remove the sockets and directories that earlier servers, killed outright, left in ``folder``."""
    for stale in Path(folder).glob("rpb-fork-*/jobs.sock"):
        with contextlib.suppress(OSError, RuntimeError):
            if time.time() - stale.lstat().st_mtime > _STALE_AFTER_S and remove_stale(stale):
                stale.parent.rmdir()


def serve(socket_path: str, parent: int) -> None:
    """Listen at ``socket_path`` at once (clients queue while the preload runs) until ``parent`` ends.

    ``socket_path`` lies in a directory of its own, removed with the socket at exit; a stale socket
    found there is replaced. SIGINT, SIGTERM and SIGHUP stop the server; they are blocked while the
    socket is bound and while it is removed, and a stop signal after the first is ignored, so a
    second signal (Ctrl-C reaches both Snakemake and the server, whose onerror then sends SIGTERM)
    cannot cut the removal short, even when it arrives before the removal blocks them.
    """
    signal.pthread_sigmask(signal.SIG_BLOCK, _STOPPING)
    if remove_stale(socket_path):
        _log(f"removed a stale socket at {socket_path}")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # Bound under another name and renamed once listening: ``start`` and clients take the path's
    # existence for a listener, and a connect between bind and listen would be refused.
    binding = f"{socket_path}.binding"
    Path(binding).unlink(missing_ok=True)  # left by a server killed in this window
    listener.bind(binding)
    listener.listen(64)
    os.rename(binding, socket_path)
    server = Server(listener, parent)
    stopping: list[int] = []

    def stop(number: int, _frame: object) -> None:
        """Exit on the first stop signal; ignore later ones, which would cut the cleanup short."""
        if not stopping:
            stopping.append(number)
            sys.exit(128 + number)

    for number in _STOPPING:
        signal.signal(number, stop)
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOPPING)
        _preload()
        # Out of the collector's sight: a job's full collections would otherwise walk the millions of
        # objects torch and transformers created here (0.2 s each) and copy every page they touch.
        gc.freeze()
        server.serve()
    finally:
        signal.pthread_sigmask(signal.SIG_BLOCK, _STOPPING)
        server.stop()
        listener.close()
        Path(socket_path).unlink(missing_ok=True)
        Path(socket_path).parent.rmdir()


# --- lifecycle, from the Snakefile's onstart / onsuccess / onerror ---------------------------------


_running: subprocess.Popen | None = None  # the server :func:`start` started in this process


def start(log_path: str | os.PathLike) -> None:
    """Start a server for this process's jobs and point them at it (``RPB_FORK_SERVER``)."""
    global _running
    _remove_stale_servers(tempfile.gettempdir())
    socket_path = os.path.join(tempfile.mkdtemp(prefix="rpb-fork-"), "jobs.sock")
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        command = ["-m", "workflow_scripts.forkserver", "--socket", socket_path, "--parent", str(os.getpid())]
        environment = {**os.environ, "OMP_NUM_THREADS": "1"}
        server = subprocess.Popen(
            [sys.executable, *command], stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=environment
        )
    deadline = time.monotonic() + 30
    while not os.path.exists(socket_path):
        if server.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the fork server did not start; see {log_path}")
        time.sleep(0.01)
    os.environ[SOCKET_VARIABLE] = socket_path
    _running = server


def stop() -> None:
    """Stop the server :func:`start` started, if any (jobs then run in their own interpreters)."""
    global _running
    if _running is None:
        return
    os.environ.pop(SOCKET_VARIABLE)
    _running.terminate()
    try:
        _running.wait(timeout=30)
    except subprocess.TimeoutExpired:  # SIGTERM waits for a C call (an import of torch on a loaded machine)
        _running.kill()  # its jobs' group leaders see it gone and kill their groups
        _running.wait()
    _running = None


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m workflow_scripts.forkserver", description=__doc__)
    parser.add_argument(
        "--socket", required=True, help="path of the Unix socket to listen at, in a directory of its own"
    )
    parser.add_argument(
        "--parent", type=int, required=True, help="exit when this process is no longer our parent"
    )
    args = parser.parse_args(argv)
    serve(args.socket, args.parent)


if __name__ == "__main__":
    main()
