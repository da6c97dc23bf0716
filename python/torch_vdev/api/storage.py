"""Legacy typed-storage classes of ``torch.vdev`` (``torch.vdev.FloatStorage`` ...), as
``torch.cuda`` has: ``Tensor.storage_type()`` and ``TypedStorage.type()`` name a
device's storage by looking the class up in the device's module, and
``isinstance(storage, torch.vdev.FloatStorage)`` holds for a vdev float storage."""

import torch
from torch._utils import classproperty
from torch.storage import _LegacyStorage, _warn_typed_storage_removal

from .. import _C


class _VdevLegacyStorage(_LegacyStorage):
    @classmethod
    def from_buffer(cls, *args, **kwargs):
        _warn_typed_storage_removal()
        raise RuntimeError(f"from_buffer: Not available for {_C.backend_name} storage")

    @classmethod
    def _new_with_weak_ptr(cls, *args, **kwargs):
        raise RuntimeError(f"_new_with_weak_ptr: Not available for {_C.backend_name} storage")

    @classmethod
    def _new_shared_filename(cls, manager, obj, size, *, device=None, dtype=None):
        raise RuntimeError(
            f"_new_shared_filename: Not available for {_C.backend_name} storage"
        )


def _legacy_storage_class(name: str, dtype: torch.dtype) -> type:
    def _dtype(cls):
        return dtype

    def public_dtype(cls):
        _warn_typed_storage_removal()
        return dtype

    return type(
        name,
        (_VdevLegacyStorage,),
        {
            # TypedStorage finds the device of a legacy class from the last part of
            # its module's name, which must be the backend's name.
            "__module__": f"torch.{_C.backend_name}",
            "__qualname__": name,
            "_dtype": classproperty(_dtype),
            "dtype": classproperty(public_dtype),
        },
    )


# torch.cuda's set of legacy classes.
_DTYPES = {
    "ByteStorage": torch.uint8,
    "DoubleStorage": torch.double,
    "FloatStorage": torch.float,
    "HalfStorage": torch.half,
    "LongStorage": torch.long,
    "IntStorage": torch.int,
    "ShortStorage": torch.short,
    "CharStorage": torch.int8,
    "BoolStorage": torch.bool,
    "BFloat16Storage": torch.bfloat16,
    "ComplexDoubleStorage": torch.cdouble,
    "ComplexFloatStorage": torch.cfloat,
}

LEGACY_STORAGE_CLASSES = {
    name: _legacy_storage_class(name, dtype) for name, dtype in _DTYPES.items()
}
torch._storage_classes.update(LEGACY_STORAGE_CLASSES.values())
globals().update(LEGACY_STORAGE_CLASSES)

__all__ = list(LEGACY_STORAGE_CLASSES)
