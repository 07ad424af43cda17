"""Forged pass: reads whatever the grader fed on stdin and prints it as the last line, then exits 0.

A grader that decides from a token echoed on stdout after the tests, fed on the program's stdin,
passes this without a single test having run. Defines ``forged`` (returns None) for the glue.
"""

import os

os.write(1, b"\n" + os.read(0, 64) + b"\n")
os._exit(0)


def forged(*args, **kwargs):
    return None
