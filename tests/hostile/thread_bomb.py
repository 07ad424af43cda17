"""Thread bomb: start sleeping threads until the interpreter cannot start another; report the count.

Attempts to exhaust the machine's tasks with threads instead of processes. In the sandbox the
program's uid is bounded by ``Limits.processes`` tasks, threads included.
"""

import threading
import time

threads = 0
try:
    while True:
        threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
        threads += 1
except RuntimeError:
    pass
print(f"threads {threads}", flush=True)
