"""``python -m scalegate ...``: the commands (harness/scalegate/cli/main.py)."""

import sys

from scalegate.cli.main import main

sys.exit(main())
