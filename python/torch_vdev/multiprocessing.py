"""vdev tensors shared between processes through ``torch.multiprocessing``, as CUDA
tensors are: a vdev tensor put on a queue, or passed to a spawned process, arrives as a
vdev tensor over the same device memory (shared memory both processes map; see
``csrc/aten/SharedMemory.h``). Other tensors keep torch's reductions.
"""

import multiprocessing.reduction

import torch
import torch.multiprocessing  # registers torch's reductions, which these wrap
from torch.multiprocessing import reductions as torch_reductions

from . import _C


def _rebuild_tensor(shared_fd, nbytes, device_index, dtype, size, stride, offset, requires_grad):
    memory = _C.tensor_from_shared_memory(shared_fd.detach(), nbytes, device_index)
    tensor = torch.empty(0, dtype=dtype, device=memory.device)
    tensor.set_(memory.untyped_storage(), offset, size, stride)
    tensor.requires_grad_(requires_grad)
    return tensor


def _reduce_tensor(tensor):
    if tensor.device.type != _C.backend_name:
        return torch_reductions.reduce_tensor(tensor)
    if tensor.requires_grad and not tensor.is_leaf:
        raise RuntimeError(
            "Cowardly refusing to serialize non-leaf tensor which requires_grad, "
            "since autograd does not support crossing process boundaries.  "
            "If you just want to transfer the data, call detach() on the tensor "
            "before serializing (e.g., putting it on the queue)."
        )
    storage = tensor.untyped_storage()
    fd = _C.share_device_memory(tensor)
    return (_rebuild_tensor, (
        multiprocessing.reduction.DupFd(fd), storage.nbytes(), tensor.device.index, tensor.dtype,
        tensor.size(), tensor.stride(), tensor.storage_offset(), tensor.requires_grad))


def _refusing_device_storages(reduce_storage):
    # As CUDA storages: only tensors carry what a receiver needs (device, geometry).
    def reduce(storage):
        # (a TypedStorage's own .device warns that TypedStorage is deprecated)
        if getattr(storage, "_untyped_storage", storage).device.type == _C.backend_name:
            raise RuntimeError(
                f"Cannot pickle {_C.backend_name} storage; try pickling a {_C.backend_name} "
                "tensor instead"
            )
        return reduce_storage(storage)

    return reduce


def register() -> None:
    for tensor_type in [torch.Tensor, torch.nn.parameter.Parameter]:
        multiprocessing.reduction.ForkingPickler.register(tensor_type, _reduce_tensor)
    for storage_type, reduce_storage in [
        (torch.UntypedStorage, torch_reductions.reduce_storage),
        (torch.TypedStorage, torch_reductions.reduce_typed_storage),
    ]:
        multiprocessing.reduction.ForkingPickler.register(
            storage_type, _refusing_device_storages(reduce_storage)
        )
