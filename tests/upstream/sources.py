"""Where run_pytorch_tests.py's copies of PyTorch's test files come from, and the shims
each needs against torch 2.13's testing internals and the installed packages.

PyTorch's files are never committed here. Each is re-created outside the repository,
as <dir>/test/<file>, from the stored copy named below (the search tool's
read_file(repo, path="test/<file>", commit), read 16,000 characters at a time and
written out unchanged); `chars` is its length, which check_sources() compares.
The newest stored copy was taken: pytorch/pytorch's where it is current, else the
newest full fork's. A source with an `excerpt` is re-created as those character ranges
[start, end) of the stored copy, joined unchanged: the module's imports and helpers, the
device-generic class measured and its instantiate_device_type_tests line, for files
whose other classes (most of a 500 kB file) are not measured; `chars` is then the
length of the joined ranges.
"""

import dataclasses
import os


@dataclasses.dataclass(frozen=True)
class Source:
    repo: str
    commit: str
    chars: int
    excerpt: tuple = ()  # ((start, end), ...) of the stored copy; () for the whole file


@dataclasses.dataclass(frozen=True)
class Shim:
    """One line of Python run in the test process before the file is collected."""

    code: str
    reason: str


SOURCES = {
    "test_shape_ops.py": Source("pytorch/pytorch", "00972c015f0846e856f3fb8d46de73804a55a4de", 35524),
    "test_sort_and_select.py": Source("pytorch/pytorch", "6f3cff94d27f4f2e6ea43523525c8353730e1414", 53360),
    "test_indexing.py": Source("pytorch/pytorch", "5183443433dabc82f00dc4298b3af1d4cce25319", 75176),
    "test_unary_ufuncs.py": Source("pytorch/pytorch", "434729df9c398fdfc12660048d8f2f3f1446e194", 65544),
    "test_view_ops.py": Source("pytorch/pytorch", "9c491bc34c6ab131b18cf51db02636d65ffd3472", 80417),
    "test_type_promotion.py": Source("maggiemoss/pytorch", "4b78f85938a63c12719f266324b57ffe9f3b7581", 59994),
    "test_torch.py": Source("maggiemoss/pytorch", "4b78f85938a63c12719f266324b57ffe9f3b7581", 496100),
    "test_tensor_creation_ops.py": Source("maggiemoss/pytorch", "4b78f85938a63c12719f266324b57ffe9f3b7581", 215487),
    "test_binary_ufuncs.py": Source("pytorch/pytorch", "2c6c86ba286f20cdfcc8863b86ec2735f5d9c172", 183228),
    "test_reductions.py": Source("pytorch/pytorch", "20d26decd96326b8777d0bd8b591e593a2e7b758", 173074),
    "test_modules.py": Source("maggiemoss/pytorch", "4b78f85938a63c12719f266324b57ffe9f3b7581", 58052),
    "test_autograd.py": Source("maggiemoss/pytorch", "eb4247c60570b3bd9f6404efae673f748ea0a5ea", 54364,
                               excerpt=((0, 13191), (423070, 464096), (564705, 564852))),
    "test_nn.py": Source("maggiemoss/pytorch", "4b78f85938a63c12719f266324b57ffe9f3b7581", 309699,
                         excerpt=((0, 3556), (408803, 714871), (718764, 718839))),
    "test_optim.py": Source("maggiemoss/pytorch", "eb4247c60570b3bd9f6404efae673f748ea0a5ea", 101878),
    "test_ops.py": Source("Lord-Melflam/pytorch", "26f0db325cdb64dc0972ee2aa167df8fac18ffc7", 115881,
                          excerpt=((0, 101401), (108521, 122703), (128660, 128850), (128924, 129032))),
    "test_serialization.py": Source("maggiemoss/pytorch", "4b78f85938a63c12719f266324b57ffe9f3b7581", 304732),
}

SHIMS = {
    "test_ops.py": [
        Shim("import torch.testing._internal.common_methods_invocations as m, torch.testing._internal.common_device_type as d; "
             "m.skip, m.xfail = d.skip, d.xfail; m.skipOps = lambda test_case_name, base_test_name, to_skip: d.skipOps(to_skip)",
             "PyTorch 2.13 moved skip/xfail/skipOps to common_device_type, where skipOps takes the class and test names "
             "from the decorated function's __qualname__ (the same names the copy passes)"),
    ],
    "test_binary_ufuncs.py": [
        Shim("import torch.testing._internal.common_methods_invocations as m; m.binary_ufuncs_and_refs = m.binary_ufuncs",
             "PyTorch 2.13 folded binary_ufuncs_and_refs into binary_ufuncs (which now holds the _refs too); the copy imports the old name"),
    ],
    "test_nn.py": [
        Shim("import importlib.util, sys, torch.testing._internal.common_utils; "
             "importlib.util.find_spec('hypothesis') or sys.modules.update({name: importlib.util.module_from_spec("
             "importlib.util.spec_from_loader(name, loader=None)) for name in "
             "('hypothesis', 'torch.testing._internal.hypothesis_utils')}); "
             "sys.modules['hypothesis'].__dict__.setdefault('given', lambda *a, **k: lambda test: test)",
             "the file imports hypothesis (not installed here) for TestNN's property tests, which "
             "TestNNDeviceType does not use (common_utils is imported first: it runs without hypothesis)"),
    ],
    "test_optim.py": [
        Shim("import sys, types; sys.modules.update((name, types.ModuleType(name)) for name in "
             "('optim', 'optim.test_lrscheduler', 'optim.test_optim', 'optim.test_swa_utils')); "
             "[setattr(sys.modules['optim.' + module], cls, type(cls, (), {})) for module, cls in "
             "(('test_lrscheduler', 'TestLRScheduler'), ('test_optim', 'TestDifferentiableOptimizer'), "
             "('test_swa_utils', 'TestSWAUtils'))]",
             "the file re-exports three device-independent test classes from test/optim/, whose files "
             "are not fetched: TestOptimRenewed, its device-generic class, is what is measured"),
        Shim("import torch.testing._internal.common_optimizers as o; [setattr(info, 'supports_fused_on', "
             "(*info.supports_fused_on, 'vdev')) for info in o.optim_db if 'cpu' in info.supports_fused_on]",
             "OptimInfo.supports_fused_on names the device types PyTorch's CI runs fused kernels on, and the fused "
             "tests skip themselves elsewhere; vdev runs the CPU fused kernels, so the optimizers that have them "
             "are tested on vdev too instead of skipped"),
    ],
    "test_sort_and_select.py": [
        Shim("import numpy; numpy.msort = lambda a: numpy.sort(a, axis=0)",
             "NumPy 2 removed msort, which test_msort takes as its reference (np.sort(a, axis=0) is its definition)"),
    ],
}


def source_problems(test_dir, file_names):
    """{file: what is wrong with its copy in test_dir} for the files whose copy is missing
    or differs in length from its recorded source."""
    problems = {}
    for file_name in file_names:
        source = SOURCES.get(file_name)
        path = os.path.join(test_dir, file_name)
        if source is None:
            continue
        if not os.path.isfile(path):
            ranges = f", characters {list(source.excerpt)} joined" if source.excerpt else ""
            problems[file_name] = f"missing (fetch test/{file_name} from {source.repo} at {source.commit}{ranges})"
            continue
        with open(path, encoding="utf-8") as copy:
            chars = len(copy.read())
        if chars != source.chars:
            problems[file_name] = (f"{chars} characters, not the {source.chars} of {source.repo} at "
                                   f"{source.commit[:12]}: a different or damaged copy")
    return problems
