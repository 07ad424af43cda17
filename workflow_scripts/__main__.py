"""``python -m workflow_scripts``: see :mod:`workflow_scripts.cli`.

Where a fork server listens (``RPB_FORK_SERVER``, set by the local profile's run) the
command runs there, without paying for torch's import again; see
:mod:`workflow_scripts.forkserver`.
"""

import os
import sys

from workflow_scripts.forkserver import SOCKET_VARIABLE, forward

if socket_path := os.environ.get(SOCKET_VARIABLE):
    status = forward(socket_path, "workflow_scripts", sys.argv[1:])
    if status is not None:
        sys.exit(status)

from workflow_scripts.cli import main

sys.exit(main())
