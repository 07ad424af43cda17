"""The fork server runs a job as a fresh interpreter would, and a killed job dies with its client."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.dag import JOB_ENV, ROOT
from tests.test_train_resume import command, environment
from workflow_scripts import forkserver

pytestmark = pytest.mark.slow  # servers that preload torch, and jobs in their own interpreters

# A client for any module, as workflow_scripts/__main__.py is one for the workflow's commands.
CLIENT = (
    "import sys; from workflow_scripts.forkserver import forward; "
    "status = forward(sys.argv[1], sys.argv[2], sys.argv[3:]); "
    "sys.exit(99 if status is None else status)"
)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A running server, as the Snakefile's onstart starts one (preloading torch takes seconds)."""
    log = tmp_path_factory.mktemp("forkserver") / "server.log"
    forkserver.start(log)
    socket_path = os.environ[forkserver.SOCKET_VARIABLE]
    yield socket_path
    forkserver.stop()
    assert not Path(socket_path).parent.exists()


def client(socket_path: str, module: str, *argv: str, cwd: Path = ROOT, **env: str) -> subprocess.Popen:
    environment = {**JOB_ENV, **env}
    environment.pop(forkserver.SOCKET_VARIABLE, None)
    command = [sys.executable, "-c", CLIENT, socket_path, module, *argv]
    return subprocess.Popen(command, cwd=cwd, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finished(process: subprocess.Popen) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=120)
    return process.returncode, out.decode(), err.decode()


def alive(pid: int) -> bool:
    """Running or stopped, not gone and not a zombie left for an init that does not reap."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


def test_a_job_sees_its_own_cwd_argv_environment_and_streams(server, tmp_path):
    status, out, err = finished(
        client(server, "tests.forkserver_job", "report", "3", cwd=tmp_path, JOB_VALUE="x")
    )
    assert status == 3
    assert json.loads(out) == {"cwd": str(tmp_path), "argv": ["report", "3"], "value": "x"}
    assert err == "to stderr\n"


def test_an_exception_is_a_traceback_and_status_one(server):
    status, _, err = finished(client(server, "tests.forkserver_job", "raise"))
    assert status == 1
    assert "RuntimeError: raised on purpose" in err


def test_a_job_leaves_the_servers_imports_to_the_collector_frozen(server):
    """A job's full collections walk its own objects only, not torch's and transformers'."""
    status, out, _ = finished(client(server, "tests.forkserver_job", "gc"))
    assert status == 0
    counts = json.loads(out)
    assert counts["frozen"] > 100_000  # the preload's objects
    assert counts["tracked"] < counts["frozen"] / 10


def test_a_job_inherits_the_weight_renaming_table_a_first_model_load_builds(server):
    """The 0.4 s that transformers spends on a process's first from_pretrained is the server's, once."""
    status, out, _ = finished(client(server, "tests.forkserver_job", "warm"))
    assert status == 0
    assert json.loads(out) is True


def test_a_workflow_command_behaves_as_in_its_own_interpreter(server, tmp_path):
    """``python -m workflow_scripts`` forwards itself; output files and exit status are the same."""

    def fixture(out: Path, **env: str) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "workflow_scripts", "evaluate", "fixture", "--benchmark", "gsm8k"]
        return subprocess.run([*command, "--out", str(out)], env={**JOB_ENV, **env}, capture_output=True)

    served = fixture(tmp_path / "served.parquet", **{forkserver.SOCKET_VARIABLE: server})
    alone = fixture(tmp_path / "alone.parquet", **{forkserver.SOCKET_VARIABLE: ""})
    assert served.returncode == alone.returncode == 0, served.stderr + alone.stderr
    assert (tmp_path / "served.parquet").read_bytes() == (tmp_path / "alone.parquet").read_bytes()
    bad = [sys.executable, "-m", "workflow_scripts", "no-such-stage"]
    rejected = subprocess.run(bad, env={**JOB_ENV, forkserver.SOCKET_VARIABLE: server}, capture_output=True)
    assert rejected.returncode == 2 and b"invalid choice: 'no-such-stage'" in rejected.stderr


def test_a_training_run_is_byte_identical_with_and_without_the_server(server, training_inputs, tmp_path):
    """Forked from a server that imported torch long before, a seeded training saves the same bytes."""
    runs = {"served": server, "alone": ""}
    for name, socket_path in runs.items():
        out = tmp_path / name
        env = {**environment(), forkserver.SOCKET_VARIABLE: socket_path}
        arguments = command(training_inputs, out)
        done = subprocess.run(arguments, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
    served, alone = (sorted((tmp_path / name).iterdir()) for name in runs)
    assert [path.name for path in served] == [path.name for path in alone]
    for ours, theirs in zip(served, alone, strict=True):
        assert ours.read_bytes() == theirs.read_bytes(), ours.name


def test_killing_the_client_kills_the_job_and_its_children(server, tmp_path):
    pids_file = tmp_path / "pids.json"
    job = client(server, "tests.forkserver_job", "hang", str(pids_file))
    deadline = time.monotonic() + 60
    while not pids_file.exists():
        assert time.monotonic() < deadline and job.poll() is None, job.stderr.read()
        time.sleep(0.05)
    pids = json.loads(pids_file.read_text())
    assert all(alive(pid) for pid in pids)
    job.send_signal(signal.SIGKILL)
    job.wait()
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in pids):
        assert time.monotonic() < deadline, f"still running: {[pid for pid in pids if alive(pid)]}"
        time.sleep(0.05)


def test_another_interpreter_is_refused_and_runs_its_job_itself(server):
    """A job of another interpreter (a conda env, say) must not run in this one."""
    other = "/usr/bin/python3"
    if not Path(other).exists() or Path(other).resolve() == Path(sys.executable).resolve():
        pytest.skip("no second interpreter on this machine")
    code = f"import sys; sys.path.insert(0, {str(ROOT)!r}); " + CLIENT
    command = [other, "-I", "-c", code, server, "tests.forkserver_job", "report", "0"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 99, done.stderr


def test_a_slurm_job_is_refused_and_runs_in_its_own_allocation(server):
    """The executor plugin exports the submitting shell's socket variable; a SLURM job must not use it."""
    status, _, _ = finished(client(server, "tests.forkserver_job", "report", "0", SLURM_JOB_ID="12"))
    assert status == 99


def test_without_a_server_the_client_runs_the_job_itself(tmp_path):
    status, _, _ = finished(client(str(tmp_path / "absent.sock"), "tests.forkserver_job", "report", "0"))
    assert status == 99


def test_the_server_exits_and_cleans_up_when_its_parent_dies(tmp_path):
    starter = (
        "import os, sys, time; from workflow_scripts import forkserver; "
        f"forkserver.start({str(tmp_path / 'server.log')!r}); "
        "print(os.environ[forkserver.SOCKET_VARIABLE], flush=True); time.sleep(600)"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", starter], cwd=ROOT, env=JOB_ENV, stdout=subprocess.PIPE, text=True
    )
    socket_path = Path(parent.stdout.readline().strip())
    assert socket_path.exists()
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 120
    while socket_path.parent.exists():
        assert time.monotonic() < deadline, "the orphaned server is still listening"
        time.sleep(0.2)


def test_kill_9_of_snakemakes_process_group_kills_its_jobs(tmp_path):
    """Server and client die at once; the job, in a group of its own, once went on and wrote its outputs."""
    pids_file = tmp_path / "pids.json"
    starter = (  # Snakemake: starts the server (onstart), then runs a job through its client
        "import os, subprocess, sys; from workflow_scripts import forkserver; "
        f"forkserver.start({str(tmp_path / 'server.log')!r}); "
        "code = 'import sys; from workflow_scripts.forkserver import forward; "
        "sys.exit(forward(sys.argv[1], sys.argv[2], sys.argv[3:]) or 0)'; "
        "subprocess.run([sys.executable, '-c', code, os.environ[forkserver.SOCKET_VARIABLE], "
        f"'tests.forkserver_job', 'hang', {str(pids_file)!r}])"
    )
    snakemake = subprocess.Popen(
        [sys.executable, "-c", starter], cwd=ROOT, env=JOB_ENV, start_new_session=True
    )
    deadline = time.monotonic() + 120
    while not pids_file.exists():
        assert time.monotonic() < deadline and snakemake.poll() is None, "the job did not start"
        time.sleep(0.05)
    pids = json.loads(pids_file.read_text())
    assert os.getpgid(pids[0]) != snakemake.pid, "the job runs in a group of its own"
    os.killpg(snakemake.pid, signal.SIGKILL)
    snakemake.wait()
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in pids):
        assert time.monotonic() < deadline, f"still running: {[pid for pid in pids if alive(pid)]}"
        time.sleep(0.05)


def listening(socket_path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        return probe.connect_ex(str(socket_path)) == 0


def server_process(socket_path: Path) -> subprocess.Popen:
    """A real server at ``socket_path``, as ``start`` runs it, once it listens."""
    command = [sys.executable, "-m", "workflow_scripts.forkserver", "--socket", str(socket_path)]
    process = subprocess.Popen([*command, "--parent", str(os.getpid())], cwd=ROOT, env=JOB_ENV,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 60
    while not listening(socket_path):
        assert process.poll() is None and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    return process


def test_ctrl_c_and_stop_remove_the_socket(tmp_path):
    """Ctrl-C reaches the server and Snakemake, whose onerror then sends SIGTERM: the socket still goes."""
    socket_path = tmp_path / "server" / "jobs.sock"
    socket_path.parent.mkdir()
    process = server_process(socket_path)
    while process.poll() is None:
        for number in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(number)
            time.sleep(0.0002)
    assert not socket_path.parent.exists()


def test_a_stale_socket_is_replaced(tmp_path):
    """A server killed outright leaves its socket; the next one at that path removes it and serves."""
    socket_path = tmp_path / "server" / "jobs.sock"
    socket_path.parent.mkdir()
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(socket_path))
    dead.close()  # the file stays, nobody listens
    process = server_process(socket_path)
    try:
        assert forkserver.forward(str(socket_path), "workflow_scripts", ["--help"]) == 0
    finally:
        process.send_signal(signal.SIGINT)
        out, _ = process.communicate(timeout=60)
    assert b"removed a stale socket" in out
    assert not socket_path.parent.exists()


def test_start_sweeps_sockets_of_servers_killed_outright(tmp_path):
    """``start`` makes a new directory each time, so it also removes old ones nobody listens at."""
    folders = [tmp_path / "rpb-fork-old", tmp_path / "rpb-fork-young"]
    for folder in folders:
        folder.mkdir()
        dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        dead.bind(str(folder / "jobs.sock"))
        dead.close()
    hour_ago = time.time() - 3600
    os.utime(folders[0] / "jobs.sock", (hour_ago, hour_ago))
    forkserver._remove_stale_servers(str(tmp_path))
    assert not folders[0].exists()
    assert (folders[1] / "jobs.sock").is_socket()  # may be a server between bind and listen


def test_the_socket_appears_only_once_it_listens(tmp_path):
    """``start`` and every client take the socket's path for a listener.

    The server is slowed between bind and listen (a loaded machine), and the client connects the
    moment the path exists: a path that appeared at bind refused it, and the job's status was lost.
    """
    socket_path = tmp_path / "server" / "jobs.sock"
    socket_path.parent.mkdir()
    slowed = (
        "import socket, sys, time\n"
        "listen = socket.socket.listen\n"
        "socket.socket.listen = lambda self, *a: (time.sleep(1), listen(self, *a))[1]\n"
        "from workflow_scripts import forkserver\n"
        "forkserver.serve(sys.argv[1], int(sys.argv[2]))\n"
    )
    process = subprocess.Popen([sys.executable, "-c", slowed, str(socket_path), str(os.getpid())], cwd=ROOT,
                               env=JOB_ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not socket_path.exists():
            assert process.poll() is None and time.monotonic() < deadline, "the server did not start"
            time.sleep(0.001)
        assert forkserver.forward(str(socket_path), "workflow_scripts", ["--help"]) == 0
    finally:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=60)
