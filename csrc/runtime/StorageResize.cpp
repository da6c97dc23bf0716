#include "runtime/StorageResize.h"

#include "runtime/HostAccess.h"

#include <ATen/native/Resize.h>

namespace vdev {

void resize_storage_bytes(c10::StorageImpl* storage, size_t nbytes) {
  if (storage->nbytes() > 0 && nbytes > 0 && nbytes != storage->nbytes()) {
    synchronize_for_host_op(storage->device().index(), "resize_bytes");
  }
  at::native::resize_bytes_cpu(storage, nbytes);
}

} // namespace vdev
