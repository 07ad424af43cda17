"""Early exit from inside the tests: the first call of the solution's function exits with status 0."""

import os
import sys


def forged(*args, **kwargs):
    sys.stdout.flush()
    os._exit(0)
