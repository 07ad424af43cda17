"""Signal resistance: ignores SIGTERM, SIGINT, SIGHUP and SIGQUIT, then spins forever.

A grader that asks politely never ends it; SIGKILL at the timeout does.
"""

import signal

for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
    signal.signal(signum, signal.SIG_IGN)
while True:
    pass
