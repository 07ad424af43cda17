"""File-system escape: tampers with files and directories outside the program's own directory.

Targets come from the environment: ``SENTINELS`` (files to modify, truncate, re-time, re-mode,
rename and delete), ``OUTSIDE_DIRS`` (directories to create files and directories in, besides
/tmp, /var/tmp, /dev/shm and the parent of the working directory) and ``NAME`` (the name of what
it creates). Prints each attempt that succeeded, as the sandbox sees it.
"""

import os


def attempt(label, action, *args):
    try:
        action(*args)
    except OSError:
        return
    print(f"succeeded: {label}", flush=True)


def append(path):
    with open(path, "a") as handle:
        handle.write("tampered\n")


def create(path):
    with open(path, "w") as handle:
        handle.write("escaped\n")


name = os.environ["NAME"]
for sentinel in os.environ["SENTINELS"].split(os.pathsep):
    attempt(f"append {sentinel}", append, sentinel)
    attempt(f"truncate {sentinel}", os.truncate, sentinel, 0)
    attempt(f"chmod {sentinel}", os.chmod, sentinel, 0o777)
    attempt(f"utime {sentinel}", os.utime, sentinel, (0, 0))
    attempt(f"rename {sentinel}", os.rename, sentinel, sentinel + ".moved")
    attempt(f"remove {sentinel}", os.remove, sentinel)
outside = os.environ["OUTSIDE_DIRS"].split(os.pathsep)
for directory in [*outside, "/tmp", "/var/tmp", "/dev/shm", os.path.dirname(os.getcwd())]:
    target = os.path.join(directory, name)
    attempt(f"create {target}", create, target)
    attempt(f"mkdir {target}.d", os.mkdir, target + ".d")
    attempt(f"symlink {target}.link", os.symlink, "/etc/passwd", target + ".link")
