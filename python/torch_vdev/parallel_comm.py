"""``torch.nn.parallel.comm``'s primitives for vdev: what ``nn.DataParallel`` and its
``Broadcast``/``Scatter``/``Gather`` functions call.

``torch.nn.parallel.comm`` calls ``torch._C._broadcast``, ``_broadcast_out``,
``_broadcast_coalesced``, ``_scatter``, ``_scatter_out``, ``_gather`` and
``_gather_out``, which PyTorch compiles only into its CUDA builds (in
``torch/csrc/cuda/comm.cpp``, on CUDA device indices), although ``DataParallel`` picks a
PrivateUse1 device when no CUDA, MPS or XPU device is available. On the CPU build vdev
runs on, ``install()`` provides them with CUDA's contract for vdev device indices:
the same arguments, results (the source device's share of a broadcast is the source
tensor itself, a scatter's chunk already on its device is a view) and errors. Copies are
vdev's stream-ordered copies, on the given streams where a scatter names them.
"""

import contextlib

import torch

_device_type = None


def _device(index):
    return torch.device(_device_type, index)


def _check_on_device(tensors, what, first_position=0):
    for position, tensor in enumerate(tensors, first_position):
        if tensor.device.type != _device_type:
            raise RuntimeError(
                f"Expected all {what} to be {_device_type} tensors, but {what[:-1]} at index "
                f"{position} has device '{tensor.device}'")


def _broadcast_out(tensor, out):
    _check_on_device(out, "output tensors")
    for position, destination in enumerate(out):
        if destination.shape != tensor.shape:
            raise RuntimeError(
                f"Expected all output tensors to have same shape as the source tensor "
                f"{list(tensor.shape)}, but output tensor at index {position} has shape "
                f"{list(destination.shape)}")
    for destination in out:
        destination.copy_(tensor, non_blocking=True)
    return list(out)


def _broadcast(tensor, devices):
    copies = []
    for index in devices:
        if index < 0:
            raise RuntimeError(f"Expected non-negative device index, but got {index}")
        if tensor.device == _device(index):
            copies.append(tensor)
        else:
            copies.append(tensor.to(_device(index), non_blocking=True, copy=True))
    return copies


def _broadcast_coalesced(tensors, devices, buffer_size):
    if not devices:
        raise RuntimeError("Expected at least one device to broadcast to")
    source = _device(devices[0])
    for tensor in tensors:
        if tensor.device != source:
            raise RuntimeError("device of broadcasted tensor must appear as the first on devices list")
    # Small tensors are not coalesced into one buffer as CUDA's are: a copy between vdev
    # devices is a host memcpy queued on the stream, with no per-transfer latency to save.
    return [list(tensors)] + [
        [tensor.to(_device(index), non_blocking=True, copy=True) for tensor in tensors]
        for index in devices[1:]]


def _on_stream(streams, position):
    if streams is None or streams[position] is None:
        return contextlib.nullcontext()
    return streams[position]


def _scatter(tensor, devices, chunk_sizes, dim, streams):
    if not devices:
        raise RuntimeError("Expected at least one device to scatter to")
    if chunk_sizes is not None:
        if len(chunk_sizes) != len(devices):
            raise RuntimeError(
                f"Expected devices and chunk_sizes to be of same length, but got len(devices) = "
                f"{len(devices)} and len(chunk_sizes) = {len(chunk_sizes)}")
        chunks = tensor.split_with_sizes(list(chunk_sizes), dim)
    else:
        chunks = tensor.chunk(len(devices), dim)
    if streams is not None and len(streams) != len(chunks):
        raise RuntimeError(
            f"Expected streams to have the same number of chunks, but got {len(streams)} streams "
            f"and {len(chunks)} chunks")
    scattered = []
    for position, (chunk, index) in enumerate(zip(chunks, devices)):
        with _on_stream(streams, position):
            scattered.append(chunk.contiguous().to(_device(index), non_blocking=True)
                             if chunk.device != _device(index) else chunk)
    return scattered


def _scatter_out(tensor, out, dim, streams):
    _check_on_device(out, "output tensors")
    sizes = [destination.size(dim) for destination in out]
    if sum(sizes) != tensor.size(dim):
        raise RuntimeError(
            f"Total size for output tensors along scatter dim {dim} does not match the source "
            f"tensor size {tensor.size(dim)}")
    chunks = tensor.split_with_sizes(sizes, dim)
    for position, (chunk, destination) in enumerate(zip(chunks, out)):
        expected = list(tensor.shape)
        expected[dim] = destination.size(dim)
        if list(destination.shape) != expected:
            raise RuntimeError(
                f"Expected output tensor at index {position} to have shape {expected}, but got "
                f"{list(destination.shape)}")
        with _on_stream(streams, position):
            destination.copy_(chunk, non_blocking=True)
    return list(out)


def _gathered_shape(tensors, dim):
    """The shape of tensors concatenated along dim, checked in CUDA's order and words."""
    if not tensors:
        raise RuntimeError("Expected at least one tensor to gather from")
    first = tensors[0]
    dim = dim % first.dim() if first.dim() else dim
    expected = list(first.shape)
    total = 0
    for position, tensor in enumerate(tensors):
        _check_on_device([tensor], "input tensors", position)
        if tensor.dim() != len(expected):
            raise RuntimeError(
                f"Expected all input tensors to have the same number of dimensions, but tensor "
                f"at index {position} has {tensor.dim()} dimensions, (expected {len(expected)})")
        expected[dim] = tensor.size(dim)
        if list(tensor.shape) != expected:
            raise RuntimeError(
                f"Input tensor at index {position} has invalid shape {list(tensor.shape)}, but "
                f"expected {expected}")
        total += tensor.size(dim)
    expected[dim] = total
    return expected, dim


def _gather_into(tensors, out, dim):
    offset = 0
    for tensor in tensors:
        out.narrow(dim, offset, tensor.size(dim)).copy_(tensor, non_blocking=True)
        offset += tensor.size(dim)
    return out


def _gather(tensors, dim, destination_index):
    shape, dim = _gathered_shape(tensors, dim)
    if destination_index == -1:
        destination = torch.device("cpu")
    elif destination_index is None:
        destination = _device(torch.accelerator.current_device_index())
    else:
        destination = _device(destination_index)
    out = torch.empty(shape, dtype=tensors[0].dtype, device=destination)
    return _gather_into(tensors, out, dim)


def _gather_out(tensors, out, dim):
    shape, dim = _gathered_shape(tensors, dim)
    if list(out.shape) != shape:
        raise RuntimeError(f"Expected out tensor to have shape {shape}, but got {list(out.shape)}")
    return _gather_into(tensors, out, dim)


_PRIMITIVES = {
    "_broadcast": _broadcast,
    "_broadcast_out": _broadcast_out,
    "_broadcast_coalesced": _broadcast_coalesced,
    "_scatter": _scatter,
    "_scatter_out": _scatter_out,
    "_gather": _gather,
    "_gather_out": _gather_out,
}


def install(device_type):
    """Provides the primitives torch._C lacks (all of them on a CPU build; none where
    PyTorch was built with CUDA, whose own stay in place)."""
    global _device_type
    _device_type = device_type
    for name, primitive in _PRIMITIVES.items():
        if not hasattr(torch._C, name):
            setattr(torch._C, name, primitive)
