"""The scaling benchmarks users run: one test per strategy x model x topology.

    pytest scaling_tests -k ddp                      # every DDP case that fits this machine
    pytest scaling_tests -k "ddp and 1x2"            # one case
    pytest scaling_tests --benchmark-autosave        # also save pytest-benchmark records
    srun pytest scaling_tests -k fsdp                # inside a SLURM allocation

The matrix, options and verdicts come from the harness plugin (``pytest --help``, "scaling").
"""


def test_scaling(scaling_case, benchmark):
    scaling_case.check(benchmark)
