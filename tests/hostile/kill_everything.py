"""Mass kill: sends SIGKILL to every process it may signal (kill -1), to pid 1 and to its parent.

As an ordinary user outside namespaces this kills every process of that user, the grader
included. Prints the result of each attempt.
"""

import os
import signal

for label, target in [("everything", -1), ("pid 1", 1), ("parent", os.getppid())]:
    try:
        os.kill(target, signal.SIGKILL)
    except OSError as exc:
        print(f"{label}: {exc}", flush=True)
    else:
        print(f"{label}: sent", flush=True)
