// Native vdev kernels: matrix products.
// Each runs ATen's CPU kernel on zero-copy CPU aliases of device memory (CpuKernel.h).
#include "aten/CpuKernel.h"

#include <ATen/ops/_addmm_activation_ops.h>
#include <ATen/ops/addbmm_ops.h>
#include <ATen/ops/addmm_ops.h>
#include <ATen/ops/addmv_ops.h>
#include <ATen/ops/addr_ops.h>
#include <ATen/ops/baddbmm_ops.h>
#include <ATen/ops/bmm_ops.h>
#include <ATen/ops/dot_ops.h>
#include <ATen/ops/mm_ops.h>
#include <ATen/ops/vdot_ops.h>

namespace vdev {

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  register_cpu_kernels<
      at::_ops::mm,
      at::_ops::mm_out,
      at::_ops::addmm,
      at::_ops::addmm_out,
      at::_ops::addmm_,
      at::_ops::bmm,
      at::_ops::bmm_out,
      at::_ops::baddbmm,
      at::_ops::baddbmm_out,
      at::_ops::baddbmm_,
      at::_ops::dot,
      at::_ops::vdot,
      at::_ops::addmv,
      at::_ops::addmv_out,
      at::_ops::addmv_,
      at::_ops::addbmm,
      at::_ops::addbmm_out,
      at::_ops::addbmm_,
      at::_ops::addr,
      at::_ops::addr_out,
      at::_ops::_addmm_activation,
      at::_ops::_addmm_activation_out>(m);
}

} // namespace vdev
