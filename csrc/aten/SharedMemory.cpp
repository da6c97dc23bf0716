#include "aten/SharedMemory.h"

#include "aten/Tensor.h"
#include "runtime/Allocator.h"
#include "runtime/Device.h"
#include "runtime/HostAccess.h"
#include "runtime/Stream.h"

#include <c10/core/StorageImpl.h>
#include <c10/util/Exception.h>

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

namespace vdev {

namespace {

// One process's mapping of a shared memory file.
struct SharedMapping {
  int fd;
  void* address;
  size_t length;
  // In the process that shared the storage, the allocator's block it had: as CUDA's
  // caching allocator counts a block shared through IPC as allocated until the sender
  // frees it, vdev's statistics (and device capacity) keep counting this block while
  // the sender holds the storage. Its pages are returned to the system (the data lives
  // in the shared file); it is freed with the mapping.
  c10::DataPtr counted_block;
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
  return c10::DataPtr(address, new SharedMapping{fd, address, length, {}}, &release_mapping,
                      make_device(device));
}

// Gives the whole pages of [address, address + nbytes) back to the system; they read
// as zeros when touched again.
void release_pages(void* address, size_t nbytes) {
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto start = reinterpret_cast<uintptr_t>(address);
  const uintptr_t first = (start + page - 1) / page * page;
  const uintptr_t end = (start + nbytes) / page * page;
  if (first < end) {
    madvise(reinterpret_cast<void*>(first), end - first, MADV_DONTNEED);
  }
}

} // namespace

int share_device_memory(const at::Tensor& tensor) {
  TORCH_CHECK(is_vdev(tensor), "share_device_memory expects a ", kBackendName, " tensor");
  // A process forked after vdev was initialised holds a copy of the memory, not the
  // device's: it cannot share it.
  lazy_init();
  const c10::DeviceIndex device = tensor.device().index();
  // The receiver reads what the device's queued work writes (CUDA's receiver waits for
  // an event of the sender's stream); and work queued before the memory moves must not
  // write the memory it leaves.
  synchronize_device(device);
  c10::StorageImpl* storage = tensor.storage().unsafeGetStorageImpl();
  if (storage->data_ptr().get_deleter() == &release_mapping) {
    return static_cast<SharedMapping*>(storage->data_ptr().get_context())->fd;
  }
  // A lazy clone's memory, shared copy-on-write, is copied into memory of its own first.
  end_copy_on_write(tensor);
  const c10::DataPtr& current = storage->data_ptr();
  // Sharing moves the memory (into a memfd): refused where something else holds its
  // address, before anything is sent.
  TORCH_CHECK(
      owns_device_memory(current) || current.get() == nullptr, "cannot share this ",
      kBackendName, " tensor with another process: its memory does not come from ", kBackendName,
      "'s allocator (sharing moves a storage's memory into shared memory, and the memory's "
      "owner keeps using its address); share a clone() of it");
  TORCH_CHECK(
      !in_graph_pool(current), "cannot share this ", kBackendName, " tensor with another process: "
      "its memory belongs to a graph's private memory pool, which the graph's replays write by "
      "address (sharing moves a storage's memory into shared memory); share a clone() of it");
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
  c10::DataPtr shared = map_shared(fd, nbytes, device);
  if (nbytes > 0) {
    std::memcpy(shared.get(), current.get(), nbytes);
  }
  auto* mapping = static_cast<SharedMapping*>(shared.get_context());
  c10::DataPtr previous = storage->set_data_ptr(std::move(shared));
  if (owns_device_memory(previous)) {
    release_pages(previous.get(), nbytes);
    mapping->counted_block = std::move(previous);
  }
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
