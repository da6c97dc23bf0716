"""Expected failures of the device-generic suites, as data.

Key: (test class, test name, entry, dtype name or None for every dtype); value: a
one-line reason. Each entry is applied as `unittest.expectedFailure` through PyTorch's
DecorateInfo, so an entry that starts passing fails the run: this list only shrinks.
"""

EXPECTED_FAILURES = {}
