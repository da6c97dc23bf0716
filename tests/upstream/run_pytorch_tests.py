"""Runs PyTorch's own device-generic test files on vdev and on CPU and compares them.

    python tests/upstream/run_pytorch_tests.py --pytorch-src ~/pytorch [--files F ...]
        [-k EXPR] [--jobs N] [--timeout SECONDS] [--exclusions FILE] [--json FILE]
        [--bypass-device-restrictions]

Each file runs twice under pytest in its own process: with
PYTORCH_TESTING_DEVICE_ONLY_FOR=cpu, and with PYTORCH_TESTING_DEVICE_ONLY_FOR=vdev and
TORCH_TEST_DEVICES=vdev_device_type.py, which instantiates the tests for vdev with the
exclusion file applied. Both apply the file's shims from sources.py (upstream_shims.py).
Tests are matched across the two runs by name with the device
(TestFooCPU::test_bar_cpu_float32 and TestFooVDEV::test_bar_vdev_float32) taken out.
A table gives, per file, both runs' counts, the CPU-only and CUDA-only counts, and the
measure: of the tests passing on CPU that are not CPU-only, how many pass on vdev.
With --bypass-device-restrictions, a third process runs the file's CUDA-only tests on
vdev with the device restrictions lifted; their counts get their own column.
"""

import argparse
import concurrent.futures
import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

from exclusion_rules import ExclusionFileError, load_exclusions
from sources import SOURCES, source_problems

HERE = os.path.dirname(os.path.abspath(__file__))
BACKEND = "vdev"
DEVICES = ("cpu", BACKEND)

# The files of issue 23, small ones first; FILE::Class runs one generic test class of FILE.
DEFAULT_FILES = (
    "test_shape_ops.py",
    "test_sort_and_select.py",
    "test_type_promotion.py",
    "test_indexing.py",
    "test_view_ops.py",
    "test_unary_ufuncs.py",
    "test_tensor_creation_ops.py",
    "test_binary_ufuncs.py",
    "test_reductions.py",
    "test_serialization.py",
    "test_optim.py",
    "test_modules.py",
    "test_torch.py::TestTorchDeviceType",
    "test_nn.py::TestNNDeviceType",
    "test_autograd.py::TestAutogradDeviceType",
    "test_ops.py",
)

# How @onlyCPU / @onlyCUDA (and @onlyOn) skip a test on another device.
CPU_ONLY_SKIP = re.compile(r"Only runs on \W*cpu\W*$")
CUDA_ONLY_SKIP = re.compile(r"Only runs on .*\bcuda\b")


@dataclasses.dataclass
class Run:
    """One pytest process: a file on one device."""

    spec: str
    device: str
    outcomes: dict  # device-free test id -> (outcome, first line of the message, nodeid)
    status: str  # "ok", or why the run stopped early
    seconds: float
    log: str

    def count(self, outcome):
        return sum(1 for result, *_ in self.outcomes.values() if result == outcome)


def device_free_test_id(nodeid, device):
    """test_x.py::TestFooVDEV::test_bar_vdev_float32 -> TestFoo::test_bar_DEVICE_float32."""
    *_, class_name, test_name = nodeid.split("::")
    class_name = class_name.removesuffix(device.upper())
    # The device is the test name's last device word: parametrization suffixes come
    # before it, dtype suffixes after.
    words = test_name.split("_")
    device_word = max((i for i, word in enumerate(words) if word == device), default=None)
    if device_word is not None:
        words[device_word] = "DEVICE"
    return f"{class_name}::{'_'.join(words)}"


def read_result_log(path, device):
    """Returns ({test id: (outcome, message, nodeid)}, nodeid of a test that started but never
    finished, or None)."""
    outcomes, unfinished = {}, None
    if not os.path.exists(path):
        return outcomes, unfinished
    with open(path, encoding="utf-8") as log:
        for line in log:
            record = json.loads(line)
            if record["event"] == "started":
                unfinished = record["nodeid"]
            else:
                unfinished = None
                test_id = device_free_test_id(record["nodeid"], device)
                outcomes[test_id] = (record["outcome"], record["message"], record["nodeid"])
    return outcomes, unfinished


def run_file(spec, device, args, log_dir, bypass_nodeids=None):
    """Runs one file on one device; with bypass_nodeids, just those tests on vdev with the
    device restrictions lifted."""
    file_name, _, class_name = spec.partition("::")
    test_dir = os.path.join(args.pytorch_src, "test")
    target = os.path.join(test_dir, file_name)
    if class_name:
        target += f"::{class_name}{device.upper()}"
    stem = f"{file_name.removesuffix('.py')}{'-' + class_name if class_name else ''}-{device}"
    if bypass_nodeids is not None:
        stem += "-bypass"
    result_log = os.path.join(log_dir, stem + ".jsonl")
    output_log = os.path.join(log_dir, stem + ".log")

    env = dict(os.environ)
    env.update(
        PYTORCH_TESTING_DEVICE_ONLY_FOR=device,
        TORCH_TEST_DEVICES=os.path.join(HERE, "vdev_device_type.py"),
        VDEV_UPSTREAM_EXCLUSIONS=os.path.abspath(args.exclusions),
        VDEV_RESULT_LOG=result_log,
        VDEV_UPSTREAM_FILE=file_name,
        PYTHONPATH=os.pathsep.join(filter(None, [HERE, env.get("PYTHONPATH")])),
    )
    if args.threads:
        env["OMP_NUM_THREADS"] = str(args.threads)
    env.pop("VDEV_UPSTREAM_BYPASS_DEVICE_RESTRICTIONS", None)
    if bypass_nodeids is not None:
        env["VDEV_UPSTREAM_BYPASS_DEVICE_RESTRICTIONS"] = "1"
    # No cache provider: the run leaves nothing in the checkout.
    command = [sys.executable, "-m", "pytest", "-q",
               "-p", "upstream_shims", "-p", "vdev_result_log", "-p", "no:cacheprovider"]
    if bypass_nodeids is not None:
        # Node ids name the file relative to pytest's rootdir, which depends on the checkout.
        command += [os.path.join(test_dir, file_name) + "::" + nodeid.split("::", 1)[1]
                    for nodeid in bypass_nodeids]
    else:
        command.append(target)
        if args.k:
            command += ["-k", args.k]

    start = time.monotonic()
    with open(output_log, "w", encoding="utf-8") as output:
        # Its own session, so the wall-time cap ends the test's children too.
        process = subprocess.Popen(
            command,
            cwd=test_dir,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            returncode = process.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            returncode = None
    seconds = time.monotonic() - start

    outcomes, unfinished = read_result_log(result_log, device)
    if returncode is None:
        status = f"stopped at the {args.timeout:g} s cap"
        if unfinished is not None:
            status += f" in {unfinished.split('::')[-1]}"
    elif unfinished is not None:
        # The test took its process down (a crash in a kernel, os._exit): it failed,
        # and the tests after it never ran.
        outcomes[device_free_test_id(unfinished, device)] = (
            "failed", f"the test process died (exit {returncode})", unfinished)
        status = f"died in {unfinished.split('::')[-1]}"
    elif returncode in (0, 1):
        status = "ok"
    elif returncode == 5:
        status = "no tests collected"
    else:
        # 2: interrupted, usually an error while importing the file; 3, 4: pytest errors.
        status = f"pytest exit {returncode}{first_error(output_log)}"
    return Run(spec, device, outcomes, status, seconds, output_log)


def first_error(output_log):
    """': <the first "E   ..." line pytest printed>', or '' if there is none."""
    with open(output_log, encoding="utf-8", errors="replace") as output:
        for line in output:
            if line.startswith("E   "):
                return ": " + line[4:].strip()
    return ""


@dataclasses.dataclass
class Comparison:
    spec: str
    cpu: Run
    vdev: Run
    bypass: Run = None  # the CUDA-only tests run on vdev with the device restrictions lifted

    def _vdev_skipped(self, reason):
        return {test_id for test_id, (outcome, message, _) in self.vdev.outcomes.items()
                if outcome == "skipped" and reason.search(message)}

    @property
    def cpu_passed(self):
        return {test_id for test_id, (outcome, *_) in self.cpu.outcomes.items() if outcome == "passed"}

    @property
    def cpu_only(self):
        """CPU tests that do not run on vdev: no vdev twin (excluded, instantiated for CPU
        only, or not reached), or a twin @onlyCPU skips."""
        return sorted((set(self.cpu.outcomes) - set(self.vdev.outcomes)) | self._vdev_skipped(CPU_ONLY_SKIP))

    @property
    def cuda_only(self):
        """vdev tests @onlyCUDA (or @onlyOn naming cuda) skips."""
        return sorted(self._vdev_skipped(CUDA_ONLY_SKIP))

    @property
    def compared(self):
        """The measure's tests: those passing on CPU that are not CPU-only."""
        return sorted(self.cpu_passed - set(self.cpu_only))

    @property
    def regressions(self):
        """(vdev outcome, message, vdev nodeid) of the tests passing on CPU, not CPU-only,
        and skipped or failing on vdev."""
        outcomes = [self.vdev.outcomes[test_id] for test_id in self.compared]
        return [outcome for outcome in outcomes if outcome[0] != "passed"]

    def summary(self):
        compared = self.compared
        runs = [("cpu", self.cpu), (BACKEND, self.vdev)]
        if self.bypass is not None:
            runs.append(("bypass", self.bypass))
        file_name = self.spec.partition("::")[0]
        source = SOURCES.get(file_name)
        return {
            "file": self.spec,
            "source": f"{source.repo}@{source.commit[:7]}" if source else None,
            **{
                name: {
                    "passed": run.count("passed"),
                    "failed": run.count("failed"),
                    "skipped": run.count("skipped"),
                    "status": run.status,
                    "seconds": round(run.seconds, 1),
                    "log": run.log,
                }
                for name, run in runs
            },
            "cpu_only": len(self.cpu_only),
            "cuda_only": len(self.cuda_only),
            "cpu_passed_compared": len(compared),
            "cpu_passed_also_passing_on_vdev": len(compared) - len(self.regressions),
            "regressions": [
                {"test": nodeid, "outcome": outcome, "message": message}
                for outcome, message, nodeid in self.regressions
            ],
            "bypass_failures": [
                {"test": nodeid, "outcome": outcome, "message": message}
                for outcome, message, nodeid in (self.bypass.outcomes.values() if self.bypass else ())
                if outcome == "failed"
            ],
        }


def format_table(summaries):
    with_bypass = any("bypass" in summary for summary in summaries)
    header = [
        "file",
        "cpu pass/fail/skip",
        f"{BACKEND} pass/fail/skip",
        "cpu only",
        "cuda only",
        f"measure: CPU passes (not CPU-only) passing on {BACKEND}",
    ]
    if with_bypass:
        header.append("cuda only, bypassed: pass/fail/skip")
    header.append("notes")
    rows = []
    for summary in summaries:
        counts = {
            name: "{passed}/{failed}/{skipped}".format(**summary[name]) if name in summary else "-"
            for name in (*DEVICES, "bypass")
        }
        compared = summary["cpu_passed_compared"]
        agreeing = summary["cpu_passed_also_passing_on_vdev"]
        rate = f"{agreeing}/{compared} ({100 * agreeing / compared:.1f}%)" if compared else "-"
        notes = "; ".join(
            f"{name}: {summary[name]['status']}"
            for name in (*DEVICES, "bypass")
            if name in summary and summary[name]["status"] != "ok"
        )
        row = [summary["file"], counts["cpu"], counts[BACKEND], str(summary["cpu_only"]),
               str(summary["cuda_only"]), rate]
        if with_bypass:
            row.append(counts["bypass"])
        row.append(notes)
        rows.append(row)
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = [" | ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()
             for row in [header, *rows]]
    lines.insert(1, "-+-".join("-" * width for width in widths))
    return "\n".join(lines)


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pytorch-src", required=True,
                        help="a PyTorch source checkout of the installed torch's version (its test/ is used)")
    parser.add_argument("--files", nargs="+", default=list(DEFAULT_FILES),
                        help="test files under test/, FILE or FILE::GenericClass (default: issue 4's list)")
    parser.add_argument("-k", help="pytest -k expression for every file")
    parser.add_argument("--jobs", type=int, default=1, help="pytest processes at once (default 1)")
    parser.add_argument("--timeout", type=float, default=3600,
                        help="wall-time cap in seconds of each file on each device (default 3600)")
    parser.add_argument("--exclusions", default=os.path.join(HERE, "exclusions.py"),
                        help="exclusion file (default: exclusions.py next to this script)")
    parser.add_argument("--threads", type=int, metavar="N",
                        help="intra-op (OpenMP) threads of each pytest process (OMP_NUM_THREADS); 1 keeps the CPU "
                             "runs on a loaded machine from waiting at OpenMP barriers for descheduled threads "
                             "(default: torch's)")
    parser.add_argument("--bypass-device-restrictions", action="store_true",
                        help="also run each file's CUDA-only tests on vdev with the device restrictions lifted")
    parser.add_argument("--show-failures", type=int, default=10, metavar="N",
                        help="list up to N tests per file that pass on CPU and fail on vdev (default 10)")
    parser.add_argument("--log-dir", help="where pytest output and result logs go (default: a new temp dir)")
    parser.add_argument("--json", help="also write the counts and every regression to this file")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    try:
        load_exclusions(args.exclusions)
    except (ExclusionFileError, OSError, SyntaxError) as error:
        print(f"bad exclusion file: {error}", file=sys.stderr)
        return 2
    missing = [spec for spec in args.files
               if not os.path.isfile(os.path.join(args.pytorch_src, "test", spec.partition("::")[0]))]
    if missing:
        print(f"not in {os.path.join(args.pytorch_src, 'test')}: {', '.join(missing)}", file=sys.stderr)
        return 2
    test_dir = os.path.join(args.pytorch_src, "test")
    for file_name, problem in source_problems(test_dir, [spec.partition("::")[0] for spec in args.files]).items():
        print(f"warning: {file_name}: {problem}", file=sys.stderr)
    log_dir = args.log_dir or tempfile.mkdtemp(prefix="vdev-upstream-")
    os.makedirs(log_dir, exist_ok=True)

    runs = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(run_file, spec, device, args, log_dir)
                   for spec in args.files for device in DEVICES]
        for future in concurrent.futures.as_completed(futures):
            run = future.result()
            runs[run.spec, run.device] = run
            print(f"[{run.device}] {run.spec}: {run.count('passed')} passed, {run.count('failed')} failed, "
                  f"{run.count('skipped')} skipped in {run.seconds:.0f} s ({run.status})",
                  file=sys.stderr, flush=True)

    comparisons = [Comparison(spec, runs[spec, "cpu"], runs[spec, BACKEND]) for spec in args.files]
    if args.bypass_device_restrictions:
        with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
            futures = {
                pool.submit(run_file, comparison.spec, BACKEND, args, log_dir,
                            [comparison.vdev.outcomes[test_id][2] for test_id in comparison.cuda_only]): comparison
                for comparison in comparisons if comparison.cuda_only
            }
            for future, comparison in futures.items():
                comparison.bypass = future.result()
    summaries = [comparison.summary() for comparison in comparisons]
    print(format_table(summaries))
    for summary in summaries:
        for failures, what in ((summary["regressions"], f"pass on CPU and do not pass on {BACKEND}"),
                               (summary["bypass_failures"], f"are CUDA-only and fail on {BACKEND} when bypassed")):
            if failures and args.show_failures:
                shown = failures[: args.show_failures]
                print(f"\n{summary['file']}: {len(failures)} tests {what}"
                      + (f" (first {len(shown)})" if len(shown) < len(failures) else ""))
                for failure in shown:
                    print("  {test}: {outcome}: {message}".format(**failure)[:240])
    print(f"\nlogs: {log_dir}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(summaries, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
