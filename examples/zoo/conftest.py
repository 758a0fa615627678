# Nothing to register: scalegate's pytest plugin comes with `pip install scalegate` (its pytest11 entry point),
# and the scaling_script marker in scaling_tests/test_zoo.py declares the cases.
