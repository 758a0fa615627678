"""``python -m scalegate.worker SPEC.json OUT_DIR``: one rank (harness/scalegate/worker/entry.py)."""

from scalegate.worker.entry import main, quick_exit

quick_exit(main())
