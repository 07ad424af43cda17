"""``python -m workflow_scripts``: see :mod:`workflow_scripts.cli`."""

import sys

from workflow_scripts.cli import main

sys.exit(main())
