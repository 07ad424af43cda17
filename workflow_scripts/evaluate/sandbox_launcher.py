"""The sandbox's launcher: the process between the caller and a model-written program.

An isolated interpreter without site (``python -I -S -B``) imports this module for every program
(``sandbox._launcher_command``) and calls :func:`launcher_main` with the caller's plan: as
(namespace) root and pid 1 of the namespaces, or as the session leader of a process group, it
mounts the program's private filesystem, forks, and the child drops to the program's limits, uid
and capabilities and execs it. It is single-threaded, so forking is safe. Kept apart from
``sandbox`` and to the few standard modules it needs, because its imports are paid once per
program: the caller's module (dataclasses, enum, threading, typing) took 40 ms of every run, and
the plan comes as ``marshal`` bytes (built in, same interpreter) since ``json`` would import ``re``.
"""

from __future__ import annotations

import ctypes
import fcntl
import marshal
import os
import resource
from types import SimpleNamespace

TYPE_CHECKING = False  # not ``typing.TYPE_CHECKING``: importing typing costs every program 9 ms
if TYPE_CHECKING:
    from typing import NoReturn

PROGRAM_NAME = "program.py"
# A conversing program reads the caller's messages on CALL_FDS[0] and writes its replies on
# CALL_FDS[1]; each message is an 8-byte big-endian length and that many bytes.
CALL_FDS = (3, 4)
FD_FLOOR = 16  # the launcher moves descriptors at or above this before placing CALL_FDS
DEVICE_LINKS = (
    ("/dev/fd", "/proc/self/fd"),
    ("/dev/stdin", "/proc/self/fd/0"),
    ("/dev/stdout", "/proc/self/fd/1"),
    ("/dev/stderr", "/proc/self/fd/2"),
)
_MS_NOSUID, _MS_NODEV, _MS_RDONLY, _MS_NOEXEC = 0x2, 0x4, 0x1, 0x8
_MS_REMOUNT, _MS_BIND, _MS_REC = 0x20, 0x1000, 0x4000
_PR_SET_NO_NEW_PRIVS, _PR_CAPBSET_DROP = 38, 24
# mount_setattr(2), Linux >= 5.12; one number on every architecture but alpha (new syscalls since 424).
_SYS_MOUNT_SETATTR, _AT_FDCWD, _AT_RECURSIVE, _MOUNT_ATTR_RDONLY = 442, -100, 0x8000, 0x1


def report(fd: int, line: str) -> None:
    os.write(fd, (line + "\n").encode("utf-8"))


def _libc_call(name: str, *args: object) -> None:
    """Call a libc function that returns -1 and sets errno on failure; raise OSError then."""
    if getattr(ctypes.CDLL(None, use_errno=True), name)(*args) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{name}{args}: {os.strerror(errno)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    encoded = [None if s is None else s.encode() for s in (source, target, fstype, data)]
    _libc_call("mount", *encoded[:3], ctypes.c_ulong(flags), encoded[3])


class _MountAttr(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in ("attr_set", "attr_clr", "propagation", "userns_fd")]


def _seal_filesystem() -> None:
    """Make every mount read-only (also those below /), then mount a /proc of this PID namespace."""
    attr = _MountAttr(attr_set=_MOUNT_ATTR_RDONLY)
    number, directory, flags, size = map(
        ctypes.c_long, (_SYS_MOUNT_SETATTR, _AT_FDCWD, _AT_RECURSIVE, ctypes.sizeof(attr))
    )
    _libc_call("syscall", number, directory, b"/", flags, ctypes.byref(attr), size)
    _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)


def _private_filesystem(plan: SimpleNamespace) -> None:
    """Seal if planned, mount the plan's tmpfs, bind the interpreter and devices back, copy the program in."""
    program = os.path.join(plan.workdir, PROGRAM_NAME)
    with open(program, "rb") as host_copy:
        source = host_copy.read()
    # Opened before they are hidden; bound back through /proc/self/fd.
    keep = {d: os.open(d, os.O_PATH | os.O_DIRECTORY) for d in plan.expose}
    devices = {d: os.open(d, os.O_PATH) for d in plan.devices}
    if plan.sealed:
        _seal_filesystem()
    for target, options in plan.tmpfs:
        os.makedirs(target, mode=0o755, exist_ok=True)
        _mount("tmpfs", target, "tmpfs", _MS_NOSUID | _MS_NODEV, options)
    for target, fd in keep.items():
        os.makedirs(target, mode=0o755, exist_ok=True)
        _mount(f"/proc/self/fd/{fd}", target, None, _MS_BIND | _MS_REC)
        _mount(None, target, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)
        os.close(fd)
    for target, fd in devices.items():
        os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o666))
        _mount(f"/proc/self/fd/{fd}", target, None, _MS_BIND)
        os.close(fd)
    if plan.devices:
        for link, target in DEVICE_LINKS:
            os.symlink(target, link)
    with open(program, "wb") as private_copy:
        private_copy.write(source)


def _place_call_fds(plan: SimpleNamespace) -> int:
    """In the forked child: the call pipes at ``CALL_FDS`` for the program to inherit, the status
    pipe (close-on-exec) moved out of their way; its new number."""
    status_fd = fcntl.fcntl(plan.status_fd, fcntl.F_DUPFD_CLOEXEC, FD_FLOOR)
    moved = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, FD_FLOOR) for fd in plan.call_fds]
    for fd in (plan.status_fd, *plan.call_fds):
        os.close(fd)
    for target, fd in zip(CALL_FDS, moved, strict=True):
        os.dup2(fd, target)
        os.close(fd)
    return status_fd


def _become_program(plan: SimpleNamespace) -> NoReturn:
    """In the forked child: call pipes, limits, the program's uid, its directory, then exec."""
    status_fd = plan.status_fd
    try:
        if plan.call_fds:
            status_fd = _place_call_fds(plan)
        for res, soft, hard in plan.rlimits:
            resource.setrlimit(res, (soft, hard))
        if plan.uid is not None:
            os.setgroups([])
            os.setresgid(plan.uid, plan.uid, plan.uid)
            os.setresuid(plan.uid, plan.uid, plan.uid)
        if plan.sealed:  # namespace root: an empty bounding set leaves exec no capability to grant
            with open("/proc/sys/kernel/cap_last_cap") as last:
                for cap in range(int(last.read()) + 1):
                    _libc_call("prctl", *map(ctypes.c_ulong, (_PR_CAPBSET_DROP, cap, 0, 0, 0)))
        os.chdir(plan.workdir)
        _libc_call("prctl", *map(ctypes.c_ulong, (_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)))
        os.execve(plan.argv[0], plan.argv, plan.env)
    except BaseException as exc:  # any failure before exec is reported, never raised
        report(status_fd, f"error starting the program: {exc!r}")
    os._exit(127)


def _reap_until(child: int) -> int:
    """Reap children (as pid 1, also orphans) until ``child`` ends; its exit code (minus signal)."""
    while True:
        pid, status = os.waitpid(-1, 0)
        if pid == child:
            return os.waitstatus_to_exitcode(status)


def encode_plan(fields: dict) -> str:
    """The launcher's argument: a plan's fields (plain data) as hex of ``marshal`` bytes."""
    return marshal.dumps(fields).hex()


def launcher_main(plan_hex: str) -> NoReturn:
    """The launcher: report its pid, prepare the namespaces, run the program, report how it ended.

    ``plan_hex`` is the caller's ``sandbox.Plan`` (``encode_plan``); its fields are read as attributes.
    """
    plan = SimpleNamespace(**marshal.loads(bytes.fromhex(plan_hex)))
    os.set_inheritable(plan.status_fd, False)
    try:
        report(plan.status_fd, f"pid {os.readlink('/proc/self')}")  # as the caller's /proc numbers it
        if plan.tmpfs:
            _private_filesystem(plan)
        child = os.fork()
        if child == 0:
            _become_program(plan)
        for fd in plan.call_fds:  # the program's alone, so that its end closes them
            os.close(fd)
        report(plan.status_fd, f"exit {_reap_until(child)}")
    except BaseException as exc:  # the caller must learn of any launcher failure
        report(plan.status_fd, f"error {exc!r}")
    os._exit(0)
