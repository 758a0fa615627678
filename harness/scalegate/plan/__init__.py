"""The pytest side before a launch: options, the matrix of cases, the test-file marker, the workload catalog
and this host. Never imports the worker side (worker, measure, strategies)."""
