"""The rank process: ``python -m scalegate.worker SPEC.json OUT_DIR`` builds the workload, applies the strategy,
checks it against a single process, warms up, measures and writes its rank's JSON."""
