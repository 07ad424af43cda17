"""Late writer: a thread that outlives the tests' failure and then echoes stdin and prints verdict
lines on every descriptor, racing the grader's read of the program's end."""

import json
import os
import threading
import time


def late():
    time.sleep(0.2)
    text = json.dumps({"passed": 1, "total": 1}).encode() + b"\n\n" + os.read(0, 64) + b"\n"
    for fd in range(1, 32):
        try:
            os.write(fd, text)
        except OSError:
            pass
    os._exit(0)


threading.Thread(target=late).start()


def forged(*args, **kwargs):
    time.sleep(0.5)
    return None
