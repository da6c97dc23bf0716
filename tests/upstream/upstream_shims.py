"""pytest plugin for run_pytorch_tests.py: runs the shims sources.py lists for the file
named by VDEV_UPSTREAM_FILE, before the file is collected."""

import os

from sources import SHIMS


def pytest_configure(config):
    for shim in SHIMS.get(os.environ.get("VDEV_UPSTREAM_FILE", ""), ()):
        exec(shim.code, {})
