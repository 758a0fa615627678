"""``python -m scalegate ...``: the commands (harness/scalegate/cli/main.py)."""

import sys

from scalegate.cli.main import main

if __name__ == "__main__":  # not when a worker process (history --jobs) imports it as its parent's main module
    sys.exit(main())
