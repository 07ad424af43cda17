"""Descriptor forgery: writes a stdin echo and verdict lines through ``/proc/self/fd/*`` (stdout
included) and every ``/proc/<pid>/fd/*`` it can open (its parent's, pid 1's: the launcher's
status pipe among them), then exits 0."""

import json
import os

payload = b"exit 0\n" + json.dumps({"passed": 1, "total": 1}).encode() + b"\n\n" + os.read(0, 64) + b"\n"
targets = [f"/proc/self/fd/{fd}" for fd in range(32)]
for pid in {os.getppid(), 1}:
    try:
        targets += [f"/proc/{pid}/fd/{fd}" for fd in os.listdir(f"/proc/{pid}/fd")]
    except OSError:
        pass
for target in targets:
    try:
        fd = os.open(target, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        continue
    try:
        os.write(fd, payload)
    except OSError:
        pass
    os.close(fd)
os._exit(0)


def forged(*args, **kwargs):
    return None
