"""Correctness on the launching side: gradient and parameter agreement, convergence, sharding, tolerances."""
