#include "aten/CpuKernel.h"

#include <ATen/core/dispatch/Dispatcher.h>

namespace vdev::cpu_kernel_detail {

std::vector<bool> written_arguments(const char* name, const char* overload_name) {
  const c10::FunctionSchema& schema =
      c10::Dispatcher::singleton().findSchemaOrThrow(name, overload_name).schema();
  std::vector<bool> written;
  written.reserve(schema.arguments().size());
  for (const c10::Argument& argument : schema.arguments()) {
    written.push_back(argument.alias_info() != nullptr && argument.alias_info()->isWrite());
  }
  return written;
}

} // namespace vdev::cpu_kernel_detail
