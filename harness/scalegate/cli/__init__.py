"""``python -m scalegate ...``: the commands on finished runs, the PR gate and its rounds, record-baselines, bisect."""
