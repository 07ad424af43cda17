"""A job for the fork-server tests: ``python -m tests.forkserver_job <what> [...]``.

report STATUS   print its cwd, argv and $JOB_VALUE; a line on stderr; exit with STATUS
hang PIDFILE    start a grandchild, write both pids to PIDFILE, then sleep
raise           raise an exception
gc              print how many objects the collector has frozen and how many it tracks
warm            print whether transformers' weight-renaming table is already built
"""

import gc
import json
import os
import subprocess
import sys
import time

what = sys.argv[1]
if what == "report":
    print(json.dumps({"cwd": os.getcwd(), "argv": sys.argv[1:], "value": os.environ.get("JOB_VALUE")}))
    print("to stderr", file=sys.stderr)
    sys.exit(int(sys.argv[2]))
if what == "hang":
    grandchild = subprocess.Popen(["sleep", "600"])
    with open(sys.argv[2] + ".tmp", "w") as pids:
        json.dump([os.getpid(), grandchild.pid], pids)
    os.replace(sys.argv[2] + ".tmp", sys.argv[2])
    time.sleep(600)
if what == "raise":
    raise RuntimeError("raised on purpose")
if what == "gc":
    print(json.dumps({"frozen": gc.get_freeze_count(), "tracked": len(gc.get_objects())}))
if what == "warm":
    from transformers import conversion_mapping

    print(json.dumps(conversion_mapping._checkpoint_conversion_mapping_cache is not None))
