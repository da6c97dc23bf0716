// The two kernels torch.amp.GradScaler runs on the gradients' device: unscaling with
// the inf/nan check, and the scale's growth/backoff update. ATen's CPU kernels do
// both on aliases of the device tensors, so they behave exactly as on CPU and CUDA.
#include "aten/CpuKernel.h"

#include <ATen/ops/_amp_foreach_non_finite_check_and_unscale_ops.h>
#include <ATen/ops/_amp_update_scale_ops.h>

namespace vdev {

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  register_cpu_kernels<
      at::_ops::_amp_foreach_non_finite_check_and_unscale_, at::_ops::_amp_update_scale_>(m);
}

} // namespace vdev
