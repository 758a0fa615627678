"""What both sides of the process boundary share, and nothing else: the case spec, topology, results,
metrics' definitions, heartbeats, CPU binding, errors and atomic files. Imports nothing of scalegate's."""

SCHEMA_VERSION = 1  # of every file both sides write and read: rank results, case results, baselines
