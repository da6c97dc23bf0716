"""Python kernels: implement or override any vdev op in Python.

``@torch_vdev.kernel("aten::gelu")`` makes a Python function vdev's kernel for an op. The
function receives CPU tensors that alias vdev memory (zero copy: ``.numpy()`` works on
them) and returns CPU tensors, or writes into its in-place / ``out=`` arguments; the
results become vdev tensors without a copy (tensors not in device memory, such as
``torch.from_numpy`` results, are copied in). It is called as torch.library calls
kernels: positional arguments, keyword-only arguments as keywords, arguments left at
their default omitted. Returning ``NotImplemented`` hands the call to the op's CPU kernel.

A Python kernel is registered at vdev's dispatch key, below autograd: it takes
precedence over vdev's native kernel or fallback for vdev tensors only, the op's
derivative formula still applies, and ``remove()`` restores the kernel it replaced.
"""

from __future__ import annotations

import functools
import warnings
from typing import Callable, Dict, Iterable, Mapping, Optional, Tuple, Union

import torch
from torch._ops import OpOverload, OpOverloadPacket

from . import _C

OpLike = Union[str, OpOverload, OpOverloadPacket]

# Copies between devices reach vdev with a CPU argument beside a vdev one; a kernel on
# CPU aliases cannot tell the two apart, so these stay vdev's own.
_CROSS_DEVICE_OPS = frozenset(
    {
        "aten::copy_",
        "aten::_copy_from",
        "aten::_copy_from_and_resize",
        "aten::_has_compatible_shallow_copy_type",
    }
)

# Registrations last until removed, whether or not their creator keeps a reference.
_active: set = set()


def _resolve_ops(op: OpLike) -> Tuple[OpOverload, ...]:
    """The overloads ``op`` names: one for an OpOverload or ``"ns::name.overload"``
    (``"ns::name"`` is the default overload), all of them for an OpOverloadPacket."""
    if isinstance(op, str):
        op = _op_from_name(op)
    if isinstance(op, OpOverloadPacket):
        overloads = _dispatcher_overloads(op)
    elif isinstance(op, OpOverload):
        overloads = (op,)
    else:
        raise TypeError(
            f"expected an op name such as 'aten::gelu', an OpOverload or an OpOverloadPacket, "
            f"got {type(op).__name__}"
        )
    if not overloads:
        raise ValueError(f"{op} has only TorchScript overloads: no tensor reaches a kernel for it")
    for overload in overloads:
        if not torch._C._dispatch_has_kernel(overload.name()):
            raise ValueError(
                f"{overload.name()} is a TorchScript operator: no tensor reaches a kernel for it"
            )
        if overload._schema.name in _CROSS_DEVICE_OPS:
            raise ValueError(
                f"{overload._schema.name} copies between devices: vdev cannot run it as a Python kernel"
            )
    return overloads


# A packet also lists TorchScript-only overloads (aten::add.int), which the dispatcher
# never sees.
def _dispatcher_overloads(packet: OpOverloadPacket) -> Tuple[OpOverload, ...]:
    overloads = (getattr(packet, name) for name in packet.overloads())
    return tuple(o for o in overloads if torch._C._dispatch_has_kernel(o.name()))


def _op_from_name(name: str) -> OpOverload:
    namespace, separator, rest = name.partition("::")
    if not separator:
        raise ValueError(f"op name '{name}' needs a namespace, as in 'aten::{name}'")
    op_name, _, overload = rest.partition(".")
    try:
        packet = getattr(getattr(torch.ops, namespace), op_name)
    except AttributeError:
        raise ValueError(f"unknown op '{name}'") from None
    overload = overload or "default"
    available = [op._overloadname for op in _dispatcher_overloads(packet)]
    if overload not in available:
        raise ValueError(
            f"{namespace}::{op_name} has no overload '{overload}' (it has "
            f"{', '.join(available)}); torch.ops.{namespace}.{op_name} names all of them"
        )
    return getattr(packet, overload)


def _warn_if_composite(op: OpOverload) -> None:
    if _decomposes_already(op):
        warnings.warn(
            f"{op.name()} is CompositeImplicitAutograd: it decomposes into other ops, through "
            f"which autograd differentiates it. A vdev kernel replaces that decomposition for "
            f"vdev tensors, so gradients cannot flow through {op.name()} on vdev.",
            stacklevel=3,
        )


class Registration:
    """Kernels registered for vdev. ``remove()``, or leaving a ``with`` block, restores
    the kernels they replaced."""

    def __init__(self, kernels: Iterable[Tuple[OpOverload, Callable, bool]]):
        """Registers each ``(op, function, receives_cpu_aliases)``: the function receives
        CPU aliases, or vdev tensors when ``receives_cpu_aliases`` is false."""
        self.ops: Tuple[OpOverload, ...] = ()
        self._handles = []
        try:
            for op, function, receives_cpu_aliases in kernels:
                register = (
                    _C.register_cpu_alias_kernel if receives_cpu_aliases else _C.register_device_kernel
                )
                self._handles.append(register(op._schema.name, op._schema.overload_name, function))
                self.ops += (op,)
        except BaseException:
            self.remove()
            raise
        _active.add(self)

    def remove(self) -> None:
        while self._handles:
            self._handles.pop().remove()
        _active.discard(self)

    def __enter__(self) -> "Registration":
        return self

    def __exit__(self, *exc_info) -> None:
        self.remove()


class PythonKernel(Registration):
    """A function registered by ``@kernel``; calling it calls the function."""

    def __init__(self, function: Callable, ops: Tuple[OpOverload, ...]):
        super().__init__((op, function, True) for op in ops)
        functools.update_wrapper(self, function)

    def __call__(self, *args, **kwargs):
        return self.__wrapped__(*args, **kwargs)


def _check_callable(function) -> None:
    if not callable(function):
        raise TypeError(f"a kernel must be callable, got {type(function).__name__}")


def kernel(*ops: OpLike) -> Callable[[Callable], PythonKernel]:
    """Decorator: the function becomes vdev's kernel for ``ops`` (op names, OpOverloads or
    OpOverloadPackets; a packet means all its overloads) until ``.remove()``."""
    if not ops:
        raise TypeError("kernel() needs at least one op")
    overloads = tuple(overload for op in ops for overload in _resolve_ops(op))
    for overload in overloads:
        _warn_if_composite(overload)

    def register(function: Callable) -> PythonKernel:
        _check_callable(function)
        return PythonKernel(function, overloads)

    return register


def kernels(table: Mapping[OpLike, Callable]) -> Registration:
    """Registers ``{op: function}`` at once; ``with torch_vdev.kernels({...}):`` scopes them."""
    return BackendEnvironment(table).install()


class BackendEnvironment:
    """A table of vdev kernels installed together, in the form of the Python backend RFC.

    Kernels given to ``register_op`` receive CPU aliases, as with ``@kernel``. Default
    decompositions (``register_default_decompositions``) cover ops the table does not
    list: they run on the vdev tensors, so the ops they decompose into reach the table's
    kernels (or vdev's own)."""

    def __init__(self, kernels: Optional[Mapping[OpLike, Callable]] = None):
        self._kernels: Dict[OpOverload, Callable] = {}
        self._decompositions: Dict[OpOverload, Callable] = {}
        for op, function in (kernels or {}).items():
            self.register_op(op, function)

    def register_op(self, op: OpLike, function: Optional[Callable] = None):
        """Adds ``function`` as the kernel of ``op``; without ``function``, a decorator."""
        if function is None:
            return functools.partial(self.register_op, op)
        _check_callable(function)
        for overload in _resolve_ops(op):
            _warn_if_composite(overload)
            self._kernels[overload] = function
        return function

    def register_default_decompositions(
        self, decompositions: Optional[Mapping[OpOverload, Callable]] = None
    ) -> None:
        """Adds decompositions (default: ``torch._decomp.core_aten_decompositions()``) for
        the ops they cover, except ops that decompose before reaching vdev anyway
        (CompositeImplicitAutograd) and view ops, whose aliasing vdev implements itself."""
        if decompositions is None:
            from torch._decomp import core_aten_decompositions

            decompositions = core_aten_decompositions()
        for op in decompositions:
            if isinstance(op, OpOverload) and not _decomposes_already(op) and not _is_view(op):
                self._decompositions[op] = decompositions[op]

    def install(self) -> Registration:
        """Registers the table: its kernels, then decompositions for ops that have no vdev
        kernel (neither in this table nor registered natively or by other Python kernels)."""
        installed = [(op, function, True) for op, function in self._kernels.items()]
        installed += [
            (op, decomposition, False)
            for op, decomposition in self._decompositions.items()
            if op not in self._kernels and not _has_vdev_kernel(op)
        ]
        return Registration(installed)


def _decomposes_already(op: OpOverload) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeImplicitAutograd")


def _has_vdev_kernel(op: OpOverload) -> bool:
    return _C.has_vdev_kernel(op._schema.name, op._schema.overload_name)


def _is_view(op: OpOverload) -> bool:
    return any(
        result.alias_info is not None and not result.alias_info.is_write for result in op._schema.returns
    )
