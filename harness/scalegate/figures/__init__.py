"""Numbers from the ranks' results, never verdicts: statistics, resources, step breakdown, stragglers, peaks."""
