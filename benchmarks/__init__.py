"""The maintained benchmarks: tools that CI, the tests and the docs run, each ``python -m benchmarks.<name>``.

One-off experiments and the data behind the docs' evidence pages live in experiments/ (experiments/README.md).
"""
