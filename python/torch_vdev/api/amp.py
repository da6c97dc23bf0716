"""``torch.vdev.amp``: mixed precision on vdev, named like ``torch.cuda.amp``.

``torch.autocast('vdev', dtype=...)`` and ``torch.amp.GradScaler('vdev')`` are the
device-generic spellings; vdev's autocast kernels apply CUDA's cast policy."""

import torch

from .. import _C

__all__ = ["autocast"]


class autocast(torch.amp.autocast):
    """``torch.autocast('vdev', ...)``, with ``torch.cuda.amp.autocast``'s arguments."""

    def __init__(
        self,
        enabled: bool = True,
        dtype: torch.dtype = torch.float16,
        cache_enabled: bool = True,
    ):
        super().__init__(
            _C.backend_name, enabled=enabled, dtype=dtype, cache_enabled=cache_enabled
        )
