"""Generates csrc/aten/AcceleratorDtypes.inc, vdev's table of accelerator dtypes, from data.

An OpInfo of PyTorch's op_db whose dtypesIfCUDA (or backward_dtypesIfCUDA) holds dtypes
its CPU dtypes lack names an op CUDA runs (or differentiates) in dtypes the CPU kernels
reject. This script runs each such entry's samples in those dtypes on vdev under a
dispatch mode, and their backward for the dtypes CUDA differentiates in. When an aten op fails there
and fails on the CPU too, the mode looks for the first wider dtype (WIDER) whose CPU
kernel takes the same call, records (op, dtype, wider dtype) and goes on with that
result, so the ops after it are reached too. The rows become the table the CPU
redispatch widens by (csrc/aten/AcceleratorDtypes.h); the script prints the entries,
the dtypes they gain and those no wider CPU dtype rescues.

    python csrc/aten/generate_accelerator_dtypes.py            # rewrites the table
    python csrc/aten/generate_accelerator_dtypes.py --check    # exits 1 if it is stale
"""

import argparse
import os
import pathlib
import sys
import warnings

os.environ["VDEV_ACCELERATOR_DTYPES"] = "0"  # discover from what the CPU kernels take
# Kernels run at their launch, so an op the CPU kernel refuses raises at its call
# (queued, its error would surface at a later synchronization, under another op).
os.environ["VDEV_LAUNCH_BLOCKING"] = "1"

import torch  # noqa: E402
from torch.testing._internal.common_methods_invocations import op_db
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

import torch_vdev  # noqa: F401

DEVICE = torch._C._get_privateuse1_backend_name()
TABLE = pathlib.Path(__file__).resolve().parent / "AcceleratorDtypes.inc"

# Candidate compute dtypes, narrowest first.
_INTEGERS = (torch.int64, torch.float64)
WIDER = {
    torch.float16: (torch.float32, torch.float64),
    torch.bfloat16: (torch.float32, torch.float64),
    torch.complex32: (torch.complex64, torch.complex128),
    torch.complex64: (torch.complex128,),
    torch.bool: (torch.uint8, torch.int64, torch.float32),
    torch.uint8: _INTEGERS,
    torch.int8: _INTEGERS,
    torch.int16: _INTEGERS,
    torch.int32: _INTEGERS,
    torch.int64: (torch.float64,),
}

SCALAR_TYPE_NAMES = {
    torch.float16: "Half",
    torch.bfloat16: "BFloat16",
    torch.float32: "Float",
    torch.float64: "Double",
    torch.complex32: "ComplexHalf",
    torch.complex64: "ComplexFloat",
    torch.complex128: "ComplexDouble",
    torch.bool: "Bool",
    torch.uint8: "Byte",
    torch.int8: "Char",
    torch.int16: "Short",
    torch.int32: "Int",
    torch.int64: "Long",
}


def accelerator_entries():
    """(OpInfo, dtypes CUDA runs it in and the CPU does not, dtypes CUDA differentiates it
    in and the CPU does not), for every entry with either."""
    for op in op_db:
        added = set(op.dtypesIf.get("cuda", op.dtypes)) - set(op.dtypes)
        added_backward = set(op.supported_backward_dtypes("cuda")) - set(op.supported_backward_dtypes("cpu"))
        if added or added_backward:
            yield op, sorted(added, key=str), sorted(added_backward, key=str)


def narrowed_dtype(computed, original, compute):
    """What vdev returns for a result the CPU computed in `computed` (as
    narrowed_type in AcceleratorDtypes.cpp; here only to carry discovery on)."""
    if computed == compute:
        return original
    if computed.is_complex and not compute.is_complex and compute.is_floating_point:
        if computed == compute.to_complex() and original in (torch.float16, torch.float32, torch.float64):
            return original.to_complex()
    if compute.is_complex and computed == compute.to_real():
        return original.to_real()
    return computed


class Discovery(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.rows = set()
        self.rows_of_entry = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        try:
            return func(*args, **kwargs)
        except Exception as error:
            widened = self.widen(func, args, kwargs)
            if widened is None:
                raise
            return widened

    def widen(self, func, args, kwargs):
        tensors = [t for t in tree_flat((args, kwargs)) if isinstance(t, torch.Tensor) and t.device.type == DEVICE]
        if not tensors:
            return None
        cpu_args, cpu_kwargs = tree_map(lambda v: v.cpu() if isinstance(v, torch.Tensor) else v, (args, kwargs))
        try:
            func(*cpu_args, **cpu_kwargs)
            return None  # the CPU takes it: not a dtype the CPU lacks
        except Exception:
            pass
        for dtype in dict.fromkeys(t.dtype for t in tensors):
            for compute in WIDER.get(dtype, ()):
                def cast(value):
                    if isinstance(value, torch.Tensor) and value.dtype == dtype:
                        return value.to(compute)
                    return compute if value == dtype else value  # dtype= arguments too

                wide_args, wide_kwargs = tree_map(cast, (cpu_args, cpu_kwargs))
                try:
                    result = func(*wide_args, **wide_kwargs)
                except Exception:
                    continue
                self.rows.add((func.name(), dtype, compute))
                self.rows_of_entry.add((func.name(), dtype, compute))
                narrow = lambda v: (
                    v.to(narrowed_dtype(v.dtype, dtype, compute)).to(DEVICE) if isinstance(v, torch.Tensor) else v
                )
                # Written arguments (in-place, out=) take the narrowed values back.
                for original, wide in zip(tree_flat((args, kwargs)), tree_flat((wide_args, wide_kwargs))):
                    if isinstance(original, torch.Tensor) and original.device.type == DEVICE and wide is not original:
                        if isinstance(wide, torch.Tensor) and wide._version > 0:
                            original.copy_(narrow(wide))
                return tree_map(narrow, result)
        return None


def tree_flat(tree):
    from torch.utils._pytree import tree_flatten

    return tree_flatten(tree)[0]


def differentiate(sample, output):
    """Backward through the sample's first differentiable output, as test_dtypes does."""
    if isinstance(output, (list, tuple)):
        output = output[0] if output and isinstance(output[0], torch.Tensor) else None
    if isinstance(output, torch.Tensor) and output.requires_grad:
        output.backward(torch.ones_like(output))


def discover():
    """(table rows, {entry: (dtypes gained, in the forward or, marked so, in the backward
    only; dtypes still failing with their errors)})."""
    mode = Discovery()
    outcome = {}
    for op, dtypes, backward_dtypes in accelerator_entries():
        gained, failing = [], {}
        mode.rows_of_entry = set()
        for dtype in dtypes:
            try:
                with mode:
                    for sample in op.sample_inputs(DEVICE, dtype):
                        op(sample.input, *sample.args, **sample.kwargs)
                gained.append(dtype)
            except Exception as error:
                failing[dtype] = f"{type(error).__name__}: {str(error).splitlines()[0]}"
        for dtype in backward_dtypes:
            try:
                with mode:
                    for sample in op.sample_inputs(DEVICE, dtype, requires_grad=True):
                        differentiate(sample, sample.output_process_fn_grad(op(sample.input, *sample.args, **sample.kwargs)))
                if dtype not in gained and dtype not in failing:
                    gained.append(f"{str(dtype).removeprefix('torch.')} (backward)")
            except Exception as error:
                failing.setdefault(dtype, f"backward: {type(error).__name__}: {str(error).splitlines()[0]}")
        outcome[op.full_name] = (gained, failing, sorted({name.partition(".")[0] for name, _, _ in mode.rows_of_entry}))
    return mode.rows, outcome


def render(rows):
    lines = [
        "// Generated by csrc/aten/generate_accelerator_dtypes.py from op_db: do not edit.",
        "// {aten op (any overload), dtype its CPU kernel lacks and CUDA's takes, dtype it computes in}",
    ]
    families = {(name.partition(".")[0], dtype, compute) for name, dtype, compute in rows}
    for family, dtype, compute in sorted(families, key=lambda row: (row[0], str(row[1]))):
        lines.append(
            f'{{"{family}", c10::ScalarType::{SCALAR_TYPE_NAMES[dtype]}, c10::ScalarType::{SCALAR_TYPE_NAMES[compute]}}},'
        )
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the table differs from op_db's")
    parser.add_argument("--markdown", action="store_true", help="print README's table of entries instead")
    options = parser.parse_args()
    warnings.simplefilter("ignore")
    rows, outcome = discover()
    if options.markdown:
        print("| OpInfo | dtypes added | aten ops widened | not yet |")
        print("| --- | --- | --- | --- |")
        short = lambda dtypes: ", ".join(str(d).removeprefix("torch.") for d in dtypes)
        for entry, (gained, failing, ops) in outcome.items():
            ops_text = ", ".join(f"`{op.removeprefix('aten::')}`" for op in ops)
            ops_text = ops_text or ("(taken without widening)" if gained else "-")
            print(f"| `{entry}` | {short(gained)} | {ops_text} | {short(failing)} |")
        return 0
    for entry, (gained, failing, _) in outcome.items():
        print(f"{entry}: gains {[str(d).removeprefix('torch.') for d in gained]}")
        for dtype, error in failing.items():
            print(f"    {str(dtype)[6:]} still fails: {error[:160]}")
    text = render(rows)
    if options.check:
        if TABLE.read_text() != text:
            print(f"{TABLE} is stale: run {sys.argv[0]}")
            return 1
        return 0
    TABLE.write_text(text)
    print(f"wrote {len(rows)} rows to {TABLE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
