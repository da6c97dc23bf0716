#pragma once

#include <c10/core/StorageImpl.h>

#include <cstddef>

namespace vdev {

// Resizes a vdev storage as ATen's resize_bytes_cpu does - into a fresh block, its
// contents copied on the host - once the work queued on the device's current stream is
// complete: that work may still write the old block, or read the memory the fresh block
// held before it was freed. Growing tensors (resize_) and untyped storages
// (UntypedStorage.resize_) come through here.
void resize_storage_bytes(c10::StorageImpl* storage, size_t nbytes);

} // namespace vdev
