"""pytest plugin for run_pytorch_tests.py: appends each test's outcome to the file
named by VDEV_RESULT_LOG as it finishes, one JSON object a line.

Written test by test (not at the end like --junitxml) so that a run cut short by the
wall-time cap, or a crash inside a kernel, keeps the outcomes it already has; a
"started" line without its outcome names the test that was running.
"""

import json
import os

_log = None
_outcomes = {}
_SEVERITY = {None: 0, "passed": 1, "skipped": 2, "failed": 3}


def _write(record):
    _log.write(json.dumps(record) + "\n")
    _log.flush()


def _first_line(report):
    if hasattr(report, "wasxfail"):
        return f"expected failure {report.wasxfail}".strip()
    if report.skipped and isinstance(report.longrepr, tuple):
        return report.longrepr[2].removeprefix("Skipped: ")
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr or "")
    return text.strip().splitlines()[0] if text.strip() else ""


def pytest_configure(config):
    global _log
    _log = open(os.environ["VDEV_RESULT_LOG"], "w", encoding="utf-8")


def pytest_unconfigure(config):
    _log.close()


def pytest_runtest_logstart(nodeid, location):
    _write({"nodeid": nodeid, "event": "started"})


def pytest_runtest_logreport(report):
    # A test failed if any phase failed, else was skipped if setup or call was skipped
    # (an expected failure counts as skipped, as in pytest's summary), else passed.
    if report.failed:
        outcome = "failed"
    elif report.skipped:
        outcome = "skipped"
    elif report.when == "call":
        outcome = "passed"
    else:
        return
    previous = _outcomes.get(report.nodeid, (None, ""))
    if _SEVERITY[outcome] > _SEVERITY[previous[0]]:
        _outcomes[report.nodeid] = (outcome, "" if outcome == "passed" else _first_line(report))


def pytest_runtest_logfinish(nodeid, location):
    outcome, message = _outcomes.pop(nodeid, ("failed", "no outcome reported"))
    _write({"nodeid": nodeid, "event": "finished", "outcome": outcome, "message": message})
