#include "aten/SharedMemory.h"

#include "aten/Tensor.h"
#include "runtime/Allocator.h"
#include "runtime/Device.h"
#include "runtime/HostAccess.h"

#include <c10/core/StorageImpl.h>
#include <c10/util/Exception.h>

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace vdev {

namespace {

// One process's mapping of a shared memory file.
struct SharedMapping {
  int fd;
  void* address;
  size_t length;
};

void release_mapping(void* context) {
  auto* mapping = static_cast<SharedMapping*>(context);
  munmap(mapping->address, mapping->length);
  close(mapping->fd);
  delete mapping;
}

// mmap refuses empty files and mappings.
size_t mapped_length(size_t nbytes) {
  return nbytes == 0 ? 1 : nbytes;
}

c10::DataPtr map_shared(int fd, size_t nbytes, c10::DeviceIndex device) {
  const size_t length = mapped_length(nbytes);
  void* address = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (address == MAP_FAILED) {
    const int error = errno;
    close(fd);
    TORCH_CHECK(false, "cannot map shared ", kBackendName, " memory of ", nbytes, " bytes: ",
                std::strerror(error));
  }
  return c10::DataPtr(address, new SharedMapping{fd, address, length}, &release_mapping,
                      make_device(device));
}

} // namespace

int share_device_memory(const at::Tensor& tensor) {
  TORCH_CHECK(is_vdev(tensor), "share_device_memory expects a ", kBackendName, " tensor");
  c10::StorageImpl* storage = tensor.storage().unsafeGetStorageImpl();
  const c10::DataPtr& current = storage->data_ptr();
  if (current.get_deleter() == &release_mapping) {
    return static_cast<SharedMapping*>(current.get_context())->fd;
  }
  // The copy below reads the memory on the host.
  synchronize_for_host_op(tensor.device().index(), "share_memory_");
  const size_t nbytes = storage->nbytes();
  const int fd = memfd_create("vdev-shared-memory", MFD_CLOEXEC);
  TORCH_CHECK(fd >= 0, "cannot create shared ", kBackendName, " memory: ", std::strerror(errno));
  if (ftruncate(fd, static_cast<off_t>(mapped_length(nbytes))) != 0) {
    const int error = errno;
    close(fd);
    TORCH_CHECK(false, "cannot allocate ", nbytes, " bytes of shared ", kBackendName, " memory: ",
                std::strerror(error));
  }
  c10::DataPtr shared = map_shared(fd, nbytes, tensor.device().index());
  if (nbytes > 0) {
    std::memcpy(shared.get(), current.get(), nbytes);
  }
  storage->set_data_ptr_noswap(std::move(shared));
  return fd;
}

at::Tensor tensor_from_shared_memory(int fd, size_t nbytes, c10::DeviceIndex device) {
  check_device_index(device);
  lazy_init();
  c10::Storage storage(c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), nbytes, map_shared(fd, nbytes, device),
      &caching_allocator(), /*resizable=*/false));
  auto tensor = at::detail::make_tensor<TensorImpl>(
      std::move(storage), caffe2::TypeMeta::Make<uint8_t>());
  tensor.unsafeGetTensorImpl()->set_sizes_contiguous({static_cast<int64_t>(nbytes)});
  return tensor;
}

} // namespace vdev
