"""One-off experiments behind the docs' evidence pages, each ``python -m experiments.<name>`` (experiments/README.md).

Nothing in tests/ or benchmarks/ imports from here.
"""
