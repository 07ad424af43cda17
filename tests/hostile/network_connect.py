"""Network access: connects to a TCP port on 127.0.0.1 and to an abstract unix socket.

Both are listened on by the caller (``PORT`` and ``ABSTRACT`` in the environment), so outside a
network namespace the connections would succeed. Prints what connected.
"""

import os
import socket


def connect(family, address):
    with socket.socket(family, socket.SOCK_STREAM) as client:
        client.settimeout(1)
        client.connect(address)
        client.sendall(b"hello from the sandbox\n")


for label, family, address in [
    ("tcp", socket.AF_INET, ("127.0.0.1", int(os.environ["PORT"]))),
    ("abstract unix", socket.AF_UNIX, "\0" + os.environ["ABSTRACT"]),
]:
    try:
        connect(family, address)
    except OSError as exc:
        print(f"{label} refused: {exc}", flush=True)
    else:
        print(f"{label} connected", flush=True)
