"""The PR gate: a plan (gate/plan.py), its sides and pairing, the rounds, the merge, the verdict; its life in
gate/life.py, top to bottom. The command line is cli/gate.py."""
