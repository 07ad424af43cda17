"""Output flood: writes to stdout without end, to exhaust the grader's memory."""

import sys

chunk = "x" * 65536
while True:
    sys.stdout.write(chunk)
