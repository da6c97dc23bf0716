"""``torch.compile(mode="reduce-overhead")`` on vdev: compiled graphs captured and
replayed as vdev graphs.

Inductor's CUDA graph trees (``cudagraph_trees.py``) are built on CUDA's private
allocator and graph calls, so vdev plugs in where Inductor lets a backend choose how a
compiled graph is wrapped: ``torch._inductor.config.cudagraph_policy``. Inductor's own
lowering check admits graphs on one CUDA device only; it is extended to graphs on one
vdev device. Graphs of other devices keep Inductor's default wrapping.

Each compiled graph is wrapped as Inductor's ``cudagraphify`` does (the non-tree
variant): per input shape, a first call runs the compiled code (warm-up), the second
captures it into a ``torch.vdev.VDEVGraph`` (its own memory pool) and every later call
copies the inputs that change between calls into the graph's static inputs and
replays it. Static inputs (parameters, buffers, a graphed forward's outputs that its
backward reads) are captured in place; a capture is per set of their addresses, as
CUDA graph trees re-record when they move. A replay's outputs are the graph's static
outputs, overwritten by its next replay, as with CUDA graphs.

What keeps a graph from being captured is told as Inductor tells it for CUDA graphs
("skipping cudagraphs due to ..."): a warning ``skipping vdev graphs due to <reason>``,
counted in ``counters["inductor"]["cudagraph_skips"]`` (and an error under
``torch._inductor.config.triton.cudagraph_or_error``). Inductor's own reasons
(CPU nodes, several devices, non-tensor inputs, ...), which it logs for CUDA graphs
only, are told when the compiled graph is set up, found in Inductor's cache or not;
mutated inputs other than parameters and buffers (a replay would mutate its static
copy, not the caller's tensor) when it is wrapped; and what a capture refuses (an op
that runs on the calling thread) when the capture fails, after which that graph runs
without graphs.
"""

import warnings
from typing import Any, Callable, Optional, Sequence

import torch
from torch._dynamo.utils import counters
from torch._inductor.cudagraph_utils import CUDAGraphPolicy

from . import BACKEND_NAME

# Inductor's counters (torch._dynamo.utils.counters["inductor"]) of vdev graphs
# captured and replayed; skipped ones count as "cudagraph_skips", as CUDA's do.
CAPTURES_COUNTER = f"{BACKEND_NAME}_graph_captures"
REPLAYS_COUNTER = f"{BACKEND_NAME}_graph_replays"

# Captures of one compiled graph for one input shape (static inputs that keep moving
# would capture without end; past this it runs without graphs).
_MAX_CAPTURES_PER_SHAPE = 8


# How Inductor's reasons begin (cudagraph_utils.format_default_skip_message).
_INDUCTOR_SKIP_PREFIX = "skipping cudagraphs due to "


def _tell_skip(reason: str, *, count: bool = True) -> None:
    """Warns that a graph runs without vdev graphs, and why; counts the skip unless
    Inductor counts it itself."""
    from torch._inductor import config

    message = f"skipping {BACKEND_NAME} graphs due to {reason.removeprefix(_INDUCTOR_SKIP_PREFIX)}"
    if count:
        counters["inductor"]["cudagraph_skips"] += 1
    if config.triton.cudagraph_or_error:
        raise RuntimeError(message)
    warnings.warn(message, stacklevel=3)


# Inductor's helpers are imported where used: registering vdev's Inductor backend,
# which imports this module, is part of importing compile_fx.


def _copy_input(static: torch.Tensor, source: torch.Tensor, expanded_dims: list) -> None:
    from torch._inductor.compile_fx import index_expanded_dims_and_copy_

    index_expanded_dims_and_copy_(static, source, expanded_dims)


class _Capture:
    """A compiled graph captured for one input shape and one set of static input addresses."""

    def __init__(self, model: Callable, inputs: Sequence[Any], static_idxs: frozenset, device_index: int):
        from torch._inductor.compile_fx import get_expanded_dims, static_input

        self.copied = [
            i for i, x in enumerate(inputs) if isinstance(x, torch.Tensor) and i not in static_idxs
        ]
        self.expanded_dims = {i: get_expanded_dims(inputs[i]) for i in self.copied}
        self.static_inputs = list(inputs)
        for i in self.copied:
            self.static_inputs[i] = static_input(inputs[i])
            _copy_input(self.static_inputs[i], inputs[i], self.expanded_dims[i])
        self.graph = torch.vdev.VDEVGraph()
        with torch.vdev.device(device_index), torch.vdev.graph(self.graph, capture_error_mode="thread_local"):
            outputs = model(list(self.static_inputs))
        self.static_outputs = outputs

    def replay(self, inputs: list) -> Any:
        for i in self.copied:
            static, source = self.static_inputs[i], inputs[i]
            if static.data_ptr() != source.data_ptr():
                _copy_input(static, source, self.expanded_dims[i])
        inputs.clear()
        self.graph.replay()
        counters["inductor"][REPLAYS_COUNTER] += 1
        return self.static_outputs


class GraphedCompiledGraph:
    """A compiled vdev graph run through vdev graphs: warm-up, capture, replays."""

    def __init__(self, model: Callable, static_input_idxs: Sequence[int], device_index: int):
        self.model = model
        self.static_idxs = frozenset(static_input_idxs)
        self.device_index = device_index
        self.warmed_up: set = set()
        self.captures: dict = {}
        self.captures_per_shape: dict = {}
        self.skip_reason: Optional[str] = None

    def _shape_key(self, inputs: Sequence[Any]) -> tuple:
        return tuple(
            (x.shape, x.stride(), x.dtype, x.device) if isinstance(x, torch.Tensor) else x for x in inputs
        )

    def _static_addresses(self, inputs: Sequence[Any]) -> tuple:
        return tuple(
            inputs[i].data_ptr() for i in sorted(self.static_idxs) if isinstance(inputs[i], torch.Tensor)
        )

    def __call__(self, inputs: list) -> Any:
        if self.skip_reason is not None:
            return self.model(inputs)
        shape = self._shape_key(inputs)
        key = (shape, self._static_addresses(inputs))
        capture = self.captures.get(key)
        if capture is not None:
            return capture.replay(inputs)
        if shape not in self.warmed_up:
            self.warmed_up.add(shape)
            return self.model(inputs)
        count = self.captures_per_shape.get(shape, 0)
        if count == _MAX_CAPTURES_PER_SHAPE:
            self._skip(f"static inputs (parameters, buffers) at new addresses on each of {count} captures")
            return self.model(inputs)
        try:
            capture = _Capture(self.model, inputs, self.static_idxs, self.device_index)
        except RuntimeError as error:
            self._skip(str(error).split("\n")[0].split(". ")[0])
            return self.model(inputs)
        self.captures_per_shape[shape] = count + 1
        counters["inductor"][CAPTURES_COUNTER] += 1
        self.captures[key] = capture
        return capture.replay(inputs)

    def _skip(self, reason: str) -> None:
        self.skip_reason = reason
        self.captures.clear()
        _tell_skip(reason)


def _is_vdev_graph(example_inputs: Sequence[Any], constants: Sequence[torch.Tensor]) -> bool:
    return any(
        isinstance(t, torch.Tensor) and t.device.type == BACKEND_NAME for t in (*example_inputs, *constants)
    )


class VdevGraphPolicy(CUDAGraphPolicy):
    """Wraps compiled vdev graphs in ``GraphedCompiledGraph``; others as Inductor does."""

    def should_wrap(self, compiled_graph) -> bool:
        # Called for every compiled graph as it is set up, before Inductor acts on the
        # reasons it found not to use graphs, which it logs for CUDA graphs only. It
        # disables graphs for these reasons itself (counting a lowering reason, but not
        # the failed checks of cudagraph_info).
        from torch._inductor import config

        if not config.triton.cudagraphs or BACKEND_NAME not in compiled_graph.device_types:
            return True
        info = compiled_graph.cudagraph_info
        if compiled_graph.disabled_cudagraphs_reason:
            _tell_skip(compiled_graph.disabled_cudagraphs_reason, count=False)
        elif info is not None and info.cudagraph_fail_reasons:
            _tell_skip(", ".join(info.cudagraph_fail_reasons))
        return True

    def cudagraphify(self, model, example_inputs, static_input_idxs, *, device_index, is_backward,
                     is_inference, **kwargs):
        if not _is_vdev_graph(example_inputs, kwargs.get("constants", ())):
            return super().cudagraphify(
                model, example_inputs, static_input_idxs, device_index=device_index,
                is_backward=is_backward, is_inference=is_inference, **kwargs,
            )
        # Parameters and buffers are captured in place; other inputs are copied into
        # static inputs, whose mutation a replay would not give back to the caller.
        mutated = [i for i in kwargs.get("mutated_input_idxs", ()) if i not in static_input_idxs]
        if mutated:
            from torch._inductor.cudagraph_utils import get_mutation_stack_trace

            _tell_skip(get_mutation_stack_trace(kwargs["placeholders"], mutated))
            return model
        return GraphedCompiledGraph(model, static_input_idxs, device_index)


def register() -> None:
    from torch._inductor import config, cudagraph_utils

    if config.cudagraph_policy is None:
        config.cudagraph_policy = VdevGraphPolicy()

    check_lowering = cudagraph_utils.check_lowering_disable_cudagraph

    def check_lowering_admitting_vdev(device_node_mapping: dict) -> Optional[str]:
        devices = [device for device in device_node_mapping if device.type != "meta"]
        if not any(device.type == BACKEND_NAME for device in devices):
            return check_lowering(device_node_mapping)
        if len(devices) == 1:
            return None
        # A CPU op in a captured graph would run once, at the capture, and never again;
        # Inductor's check drops CPU nodes when it partitions graphs around them for CUDA
        # graph trees, which vdev's wrapping does not do.
        cpu_node = device_node_mapping.get(torch.device("cpu"))
        reason = f"cpu device ({cpu_node.name})" if cpu_node is not None else "multiple devices: " + ", ".join(
            str(device) for device in devices
        )
        return _INDUCTOR_SKIP_PREFIX + reason  # told by VdevGraphPolicy.should_wrap

    cudagraph_utils.check_lowering_disable_cudagraph = check_lowering_admitting_vdev
