"""Daemon escape: a double fork with setsid(), so the survivor leaves the program's process group.

The grandchild closes its standard streams, sleeps ``DAEMON_SLEEP`` seconds, then writes
``MARKER_FILE``, while the program itself exits at once. Escaping a process-group kill, it would
outlive the run; in a PID namespace it dies with the namespace.
"""

import os
import time

if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        devnull = os.open(os.devnull, os.O_RDWR)
        for stream in (0, 1, 2):
            os.dup2(devnull, stream)
        time.sleep(float(os.environ["DAEMON_SLEEP"]))
        with open(os.environ["MARKER_FILE"], "w") as marker:
            marker.write("the daemon survived\n")
    os._exit(0)
print("program exits", flush=True)
