"""Loads and checks an exclusion file for run_pytorch_tests.py.

An exclusion file is Python defining TEST_EXCLUSIONS = {generic test class:
{generic test name or fnmatch pattern: reason}}, for example
{"TestViewOps": {"test_contiguous_nonview": "why vdev cannot run it"}}. Every entry
needs a one-line reason, so an excluded test always says why it is not run.
"""

import fnmatch
import runpy
from collections.abc import Collection


class ExclusionFileError(ValueError):
    pass


class TestNamePatterns(Collection):
    """The excluded generic test names of one class, as common_device_type asks for
    them (`name in excluded`), with fnmatch patterns matching too."""

    def __init__(self, patterns):
        self.patterns = tuple(patterns)

    def __contains__(self, name):
        return any(fnmatch.fnmatchcase(name, pattern) for pattern in self.patterns)

    def __iter__(self):
        return iter(self.patterns)

    def __len__(self):
        return len(self.patterns)


def _check_reasons(path, table_name, table):
    if not isinstance(table, dict):
        raise ExclusionFileError(f"{path}: {table_name} must be a dict, not {type(table).__name__}")
    for class_name, entries in table.items():
        if not isinstance(entries, dict):
            raise ExclusionFileError(
                f"{path}: {table_name}[{class_name!r}] must map test names to reasons, "
                f"not be a {type(entries).__name__}"
            )
        for test_name, reason in entries.items():
            if not isinstance(reason, str) or not reason.strip():
                raise ExclusionFileError(
                    f"{path}: {table_name}[{class_name!r}][{test_name!r}] has no reason"
                )
            if "\n" in reason.strip():
                raise ExclusionFileError(
                    f"{path}: {table_name}[{class_name!r}][{test_name!r}]: the reason must be one line"
                )


def load_exclusions(path):
    """Returns {generic test class: TestNamePatterns}, the form
    DeviceTypeTestBase.set_test_configs(test_exclusions=...) takes."""
    tables = runpy.run_path(path)
    if "TEST_EXCLUSIONS" not in tables:
        raise ExclusionFileError(f"{path} defines no TEST_EXCLUSIONS")
    _check_reasons(path, "TEST_EXCLUSIONS", tables["TEST_EXCLUSIONS"])
    return {
        class_name: TestNamePatterns(entries)
        for class_name, entries in tables["TEST_EXCLUSIONS"].items()
    }
