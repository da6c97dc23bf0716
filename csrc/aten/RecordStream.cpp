// Tensor.record_stream: tells the caching allocator that another stream uses the
// tensor's memory, so the memory is not reused before that stream is done with it.
#include "aten/Tensor.h"
#include "runtime/Allocator.h"

#include <torch/library.h>

namespace vdev {
namespace {

void record_stream(at::Tensor& self, c10::Stream stream) {
  caching_allocator().recordStream(self.storage().data_ptr(), stream);
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("record_stream", TORCH_FN(record_stream));
}

} // namespace vdev
