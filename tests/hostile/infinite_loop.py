"""Infinite loop: spins on the CPU forever; only the wall-clock timeout ends it."""

while True:
    pass
