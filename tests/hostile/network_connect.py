"""Network access: connects to a TCP port on 127.0.0.1, an abstract unix socket and a socket file.

All three are listened on by the caller (``PORT``, ``ABSTRACT`` and ``SOCKET`` in the
environment), so outside a network namespace the connections would succeed. The socket file lies
under /run, where a user's bus, agents and daemons listen; a network namespace does not stop a
connection by path, only the file's permissions or its absence do. Prints what connected.
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
    ("unix file", socket.AF_UNIX, os.environ["SOCKET"]),
]:
    try:
        connect(family, address)
    except OSError as exc:
        print(f"{label} refused: {exc}", flush=True)
    else:
        print(f"{label} connected", flush=True)
