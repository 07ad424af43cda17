"""Disk fill: writes 1 MiB files into its directory, /tmp and /dev/shm until writing fails.

Attempts to fill the machine's disks and memory-backed file systems. Prints the bytes written
to each directory; in the sandbox each is a tmpfs of ``Limits.file_size_mb``.
"""

import os

chunk = b"\0" * (1 << 20)
for directory in (os.getcwd(), "/tmp", "/dev/shm"):
    written = 0
    try:
        for index in range(1 << 20):
            with open(os.path.join(directory, f"fill-{index}"), "wb") as handle:
                handle.write(chunk)
            written += len(chunk)
    except OSError:
        pass
    print(f"{directory} {written}", flush=True)
