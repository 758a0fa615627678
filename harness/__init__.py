"""scalegate harness: specs, launchers, worker, strategies, metrics, baselines and the pytest plugin.

Data flows one way: CaseSpec -> launcher -> worker ranks -> per-rank JSON -> CaseResult -> checks.
The launching side (plugin, launch, baselines) never imports the worker side (worker, train) and
vice versa; both share only ``spec``, ``topology`` and ``results``.
"""

SCHEMA_VERSION = 1
