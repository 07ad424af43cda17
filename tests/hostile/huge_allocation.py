"""Huge allocation: grabs memory in 64 MiB blocks until the allocator refuses.

Attempts to exhaust the machine's memory. In the sandbox RLIMIT_AS makes the allocation fail
inside the program (MemoryError), long before the machine notices.
"""

blocks = []
while True:
    blocks.append(bytearray(64 << 20))
