"""Protocol forgery: takes over the call pipes. It answers every message itself: first with
well-formed replies of value True, then with a pickle whose loading would run ``os.system`` (in a
grader that unpickles freely, a command creating ``/tmp/rpb-forged-pickle-ran``), then one whose
value is an always-equal object of its own class."""

import os
import pickle
import struct
import sys

HEADER = struct.Struct(">Q")


class Run:
    def __reduce__(self):
        return (os.system, ("touch /tmp/rpb-forged-pickle-ran",))


class Equal:
    def __eq__(self, other):
        return True


def send(value):
    data = pickle.dumps(value, protocol=5)
    os.write(4, HEADER.pack(len(data)) + data)


def receive():
    header = os.read(3, 8)
    if len(header) < 8:
        os._exit(0)
    (size,) = HEADER.unpack(header)
    data = b""
    while len(data) < size:
        data += os.read(3, size - len(data))
    return pickle.loads(data) if sys.modules.get("pickle") else None


send(("loaded", {}))  # the load in progress
replies = [("value", True), ("value", Run()), ("value", Equal()), ("loaded", Run())]
count = 0
while True:
    try:
        receive()
    except Exception:
        pass
    send(replies[min(count, len(replies) - 1)] if count < 2 else replies[1 + count % 3])
    count += 1


def forged(*args, **kwargs):
    return True
