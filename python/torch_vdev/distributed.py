"""vdev's ``torch.distributed`` backend.

Registered when vdev loads, under the name ``_C.collective_backend_name`` ("vccl") for
``vdev`` tensors, as NCCL is for CUDA's: ``init_process_group(device_id=torch.device(
"vdev:0"))``, ``init_process_group()`` when vdev is the accelerator, ``"vccl"`` or
``"cpu:gloo,vdev:vccl"`` select it. Its collectives run on gloo over zero-copy CPU
aliases of vdev memory (``csrc/distributed/CollectiveBackend.h``).
"""

import torch
import torch.distributed as dist

from . import _C

BACKEND_NAME: str = _C.collective_backend_name


def _create_backend(options, backend_options):
    """The backend of one process group; ``options`` is c10d's
    ``_DistributedBackendOptions``."""
    if backend_options is not None:
        raise ValueError(
            f"the {BACKEND_NAME} backend takes no backend options, got {backend_options!r}"
        )
    from torch.distributed import ProcessGroupGloo

    # The gloo group carrying the communication, made as init_process_group makes one.
    transport = ProcessGroupGloo(
        options.store, options.group_rank, options.group_size, timeout=options.timeout
    )
    transport.options.global_ranks_in_group = options.global_ranks_in_group
    transport.options.group_name = options.group_id
    transport._set_sequence_number_for_group()
    return _C.make_collective_backend(transport)


def register(device_type: str) -> None:
    if dist.is_available() and BACKEND_NAME.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(
            BACKEND_NAME, _create_backend, extended_api=True, devices=[device_type]
        )
