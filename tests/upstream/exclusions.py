# PyTorch test-suite tests that run_pytorch_tests.py does not run on vdev, each with
# the reason (see exclusion_rules.py for the format). They are not instantiated for
# vdev; their CPU twins still run and show as "cpu only" in the table.
TEST_EXCLUSIONS = {}
