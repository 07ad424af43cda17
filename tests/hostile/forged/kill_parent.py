"""Parent kill: SIGKILLs its parent, pid 1, its process group and every process it may signal
(``kill -1``), so that the grader dies or reads a clean end, then exits 0. Its grader is outside
the sandbox and must survive; never run it outside one."""

import os
import signal

for target in (os.getppid(), 1, -os.getpgid(0), -1):
    try:
        os.kill(target, signal.SIGKILL)
    except OSError:
        pass
os._exit(0)


def forged(*args, **kwargs):
    return None
