"""Graph capture and replay on vdev, named like ``torch.cuda``'s graph API.

A graph is the device runtime's stream capture (``csrc/graphs/``): kernels launched on
the capturing stream are recorded, not run, and each ``replay()`` queues them again on
the current stream, on the same memory (the graph's private pool).
"""

import gc
from typing import Any, Callable, Optional, Union

import torch
from torch.utils import _pytree

from .. import _C
from .streams import Stream, StreamContext, current_stream

__all__ = [
    "VDEVGraph",
    "graph",
    "graph_pool_handle",
    "is_current_stream_capturing",
    "make_graphed_callables",
]

_CAPTURE_ERROR_MODES = ("default", "global", "thread_local", "relaxed")


def is_current_stream_capturing() -> bool:
    """True if the current stream of the current device is capturing a graph."""
    return _C._is_current_stream_capturing()


def graph_pool_handle() -> tuple[int, int]:
    """A new memory pool id: graphs captured with ``pool=`` this id share their memory
    (capture them in the order they will be replayed, as with CUDA graphs)."""
    return _C._graph_pool_handle()


class VDEVGraph(torch._C._acceleratorGraph):
    """A vdev graph, as ``torch.cuda.CUDAGraph``: ``capture_begin``/``capture_end`` on a
    non-default stream (or ``with torch.vdev.graph(g):``), then ``replay()``.

    ``keep_graph=True`` keeps the captured graph after ``capture_end`` (for
    ``debug_dump``); it is instantiated by ``instantiate()`` or at the first replay.
    """

    def __new__(cls, keep_graph: bool = False) -> "VDEVGraph":
        return super().__new__(cls, keep_graph)

    def __init__(self, keep_graph: bool = False) -> None:
        super().__init__(keep_graph)

    def capture_begin(
        self, pool: Optional[tuple[int, int]] = None, capture_error_mode: str = "global"
    ) -> None:
        """Begin capturing the current stream's work. ``pool``: a pool id from
        ``graph_pool_handle()`` or another graph's ``pool()`` to share memory with.
        ``capture_error_mode`` is CUDA's ``cudaStreamCaptureMode``: ``"global"`` refuses
        work on streams that are not capturing, from any thread, during the capture;
        ``"thread_local"`` only from this thread; ``"relaxed"`` allows it."""
        if capture_error_mode not in _CAPTURE_ERROR_MODES:
            raise ValueError(
                f"capture_error_mode must be one of {_CAPTURE_ERROR_MODES}, got {capture_error_mode!r}"
            )
        super().capture_begin(pool=pool, capture_error_mode=capture_error_mode)


class graph:
    """Context manager capturing the work of its block into ``vdev_graph``, as
    ``torch.cuda.graph``: it synchronizes the device, collects garbage and empties the
    cache, then captures on ``stream`` (by default a side stream shared by all
    captures). If the block raises, the capture ends (discarded) and the block's error
    propagates."""

    default_capture_stream: Optional[Stream] = None

    def __init__(
        self,
        vdev_graph: torch._C._acceleratorGraph,
        pool: Optional[tuple[int, int]] = None,
        stream: Optional[torch.Stream] = None,
        capture_error_mode: str = "global",
    ):
        if stream is None:
            if graph.default_capture_stream is None:
                graph.default_capture_stream = Stream()
            stream = graph.default_capture_stream
        self.vdev_graph = vdev_graph
        self.pool = pool
        self.capture_stream = stream
        self.stream_context = StreamContext(stream)
        self.capture_error_mode = capture_error_mode

    def __enter__(self) -> None:
        torch.vdev.synchronize()
        gc.collect()
        torch.vdev.empty_cache()
        self.stream_context.__enter__()
        try:
            self.vdev_graph.capture_begin(pool=self.pool, capture_error_mode=self.capture_error_mode)
        except BaseException:
            self.stream_context.__exit__(None, None, None)
            raise

    def __exit__(self, exc_type: Any, exc: Any, traceback: Any) -> bool:
        try:
            self.vdev_graph.capture_end()
        except RuntimeError:
            if exc_type is None:
                raise
            # The block's own error (which invalidated the capture) is the one to see.
        finally:
            self.stream_context.__exit__(exc_type, exc, traceback)
        return False


class _GraphedCallable:
    """One callable's captured forward and backward graphs and their static tensors."""

    def __init__(self, function: Callable, flat_inputs: list, params: tuple, treespec: Any):
        self.function = function
        self.params = params
        self.input_spec = treespec
        # Tensors the graphs read: the sample inputs, then the parameters.
        self.static_inputs = tuple(flat_inputs) + params
        self.forward_graph = VDEVGraph()
        self.backward_graph = VDEVGraph()
        self.static_outputs: tuple = ()
        self.output_spec: Any = None
        self.static_grad_outputs: tuple = ()
        self.static_grad_inputs: tuple = ()

    def requires_grad_inputs(self) -> tuple:
        return tuple(t for t in self.static_inputs if t.requires_grad)

    def call_on_static_inputs(self) -> Any:
        arguments = self.static_inputs[: len(self.static_inputs) - len(self.params)]
        return self.function(*_pytree.tree_unflatten(list(arguments), self.input_spec))

    def warm_up(self, iterations: int, allow_unused_input: bool) -> None:
        for _ in range(iterations):
            flat, _ = _pytree.tree_flatten(self.call_on_static_inputs())
            outputs = [o for o in flat if isinstance(o, torch.Tensor) and o.requires_grad]
            inputs = self.requires_grad_inputs()
            if outputs and inputs:
                torch.autograd.grad(
                    outputs, inputs, grad_outputs=[torch.ones_like(o) for o in outputs],
                    allow_unused=allow_unused_input,
                )
            del outputs

    def capture_forward(self, pool: tuple[int, int], stream: Stream) -> None:
        with graph(self.forward_graph, pool=pool, stream=stream):
            outputs = self.call_on_static_inputs()
        flat, self.output_spec = _pytree.tree_flatten(outputs)
        for output in flat:
            if not isinstance(output, torch.Tensor):
                raise TypeError(
                    "make_graphed_callables: a graphed callable must return tensors (or "
                    f"nested tuples/lists/dicts of them), got a {type(output).__name__}"
                )
        self.static_outputs = tuple(flat)

    def capture_backward(self, pool: tuple[int, int], stream: Stream, allow_unused_input: bool) -> None:
        differentiable = [o for o in self.static_outputs if o.requires_grad]
        self.static_grad_outputs = tuple(
            torch.empty_like(o) if o.requires_grad else None for o in self.static_outputs
        )
        inputs = self.requires_grad_inputs()
        with graph(self.backward_graph, pool=pool, stream=stream):
            grads = torch.autograd.grad(
                differentiable,
                inputs,
                grad_outputs=[g for g in self.static_grad_outputs if g is not None],
                allow_unused=allow_unused_input,
            ) if differentiable and inputs else ()
        by_input = iter(grads)
        self.static_grad_inputs = tuple(
            next(by_input) if t.requires_grad else None for t in self.static_inputs
        )
        # The captured autograd graph is not needed any more: dropping it lets later
        # backward passes make their own gradient accumulators (on their streams).
        self.static_outputs = tuple(o.detach() for o in self.static_outputs)

    def autograd_function(self) -> Callable:
        owner = self

        class Graphed(torch.autograd.Function):
            @staticmethod
            def forward(ctx: Any, *inputs: torch.Tensor) -> tuple:
                for static, given in zip(owner.static_inputs, inputs):
                    if static.data_ptr() != given.data_ptr():
                        static.copy_(given)
                owner.forward_graph.replay()
                return tuple(o.detach() for o in owner.static_outputs)

            @staticmethod
            @torch.autograd.function.once_differentiable
            def backward(ctx: Any, *grads: torch.Tensor) -> tuple:
                for static, given in zip(owner.static_grad_outputs, grads):
                    if static is not None and given is not None and static.data_ptr() != given.data_ptr():
                        static.copy_(given)
                owner.backward_graph.replay()
                return tuple(g.detach() if g is not None else None for g in owner.static_grad_inputs)

        def graphed(*args: Any) -> Any:
            flat, spec = _pytree.tree_flatten(args)
            if spec != owner.input_spec:
                raise TypeError(
                    "make_graphed_callables: a graphed callable must be called with arguments "
                    "of the structure of its sample_args"
                )
            outputs = Graphed.apply(*(tuple(flat) + owner.params))
            return _pytree.tree_unflatten(list(outputs), owner.output_spec)

        return graphed


def make_graphed_callables(
    callables: Union[Callable, tuple],
    sample_args: tuple,
    num_warmup_iters: int = 3,
    allow_unused_input: bool = False,
    pool: Optional[tuple[int, int]] = None,
) -> Any:
    """Graphed versions of ``callables`` (functions or ``nn.Module``s), as
    ``torch.cuda.make_graphed_callables``: each one's forward and its backward are
    captured into vdev graphs (after ``num_warmup_iters`` eager runs on a side stream)
    and replayed by an autograd function. Calls copy their tensor arguments into the
    captured inputs; outputs are the captured (static) output tensors.

    ``callables`` is one callable with ``sample_args`` its tuple of tensor arguments,
    or a tuple of callables with a tuple of such tuples (captured in order, sharing one
    memory pool: call them in that order). A module's graphed forward runs when the
    module is in the training mode it was captured in; otherwise its own forward runs.
    """
    single = not isinstance(callables, tuple)
    if single:
        callables = (callables,)
        sample_args = (sample_args,)
    if len(callables) != len(sample_args):
        raise ValueError("make_graphed_callables: give one tuple of sample arguments per callable")
    if torch.is_autocast_enabled("vdev"):
        raise RuntimeError(
            "make_graphed_callables does not support autocast: call it outside autocast regions"
        )

    graphed_parts = []
    for function, args in zip(callables, sample_args):
        if not isinstance(args, tuple):
            raise TypeError("make_graphed_callables: sample_args must be tuples of tensors")
        flat, spec = _pytree.tree_flatten(args)
        for tensor in flat:
            if not (isinstance(tensor, torch.Tensor) and tensor.device.type == "vdev"):
                raise TypeError("make_graphed_callables: sample arguments must be vdev tensors")
        params: tuple = ()
        if isinstance(function, torch.nn.Module):
            if function._backward_hooks or function._forward_hooks or function._forward_pre_hooks:
                raise RuntimeError(
                    "make_graphed_callables: modules must have no hooks registered (they would "
                    "not run on replay)"
                )
            params = tuple(function.parameters())
        graphed_parts.append(_GraphedCallable(function, flat, params, spec))

    pool = graph_pool_handle() if pool is None else pool
    stream = Stream()
    torch.vdev.synchronize()
    with StreamContext(stream):
        for part in graphed_parts:
            part.warm_up(num_warmup_iters, allow_unused_input)
    torch.vdev.synchronize()
    for part in graphed_parts:
        part.capture_forward(pool, stream)
    for part in reversed(graphed_parts):
        part.capture_backward(pool, stream, allow_unused_input)

    results = []
    for function, part in zip(callables, graphed_parts):
        graphed = part.autograd_function()
        if isinstance(function, torch.nn.Module):
            results.append(_graph_module(function, graphed))
        else:
            results.append(graphed)
    return results[0] if single else tuple(results)


def _graph_module(module: torch.nn.Module, graphed: Callable) -> torch.nn.Module:
    captured_training = module.training
    eager_forward = module.forward

    def forward(*args: Any) -> Any:
        if module.training == captured_training:
            return graphed(*args)
        return eager_forward(*args)

    module.forward = forward
    return module
