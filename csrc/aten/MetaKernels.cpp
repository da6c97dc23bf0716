#include "aten/MetaKernels.h"

#include <ATen/MetaFunctions.h>
#include <ATen/Operators.h>
#include <c10/util/flat_hash_map.h>

#include <string>

namespace vdev {
namespace {

using MetaTable = ska::flat_hash_map<c10::OperatorName, c10::KernelFunction>;

template <class Op, typename Op::schema* meta_function>
void add_meta_kernel(MetaTable& table) {
  table.emplace(
      c10::OperatorName(Op::name, Op::overload_name),
      c10::KernelFunction::makeFromUnboxedFunction(
          c10::CompileTimeFunctionPointer<typename Op::schema, meta_function>()));
}

MetaTable make_meta_table() {
  MetaTable table;
#define VDEV_META_KERNEL(op, function) \
  add_meta_kernel<at::_ops::op, static_cast<at::_ops::op::schema*>(&at::meta::function)>(table);
#include "aten/MetaKernels.inc"
#undef VDEV_META_KERNEL
  return table;
}

} // namespace

const c10::KernelFunction* meta_kernel(const c10::OperatorName& name) {
  static const MetaTable* const table = new MetaTable(make_meta_table());
  auto found = table->find(name);
  return found == table->end() ? nullptr : &found->second;
}

} // namespace vdev
