#include "aten/AcceleratorDtypes.h"

#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>

namespace vdev {
namespace {

struct Row {
  const char* name;
  c10::ScalarType dtype;
  c10::ScalarType compute;
};

constexpr Row kRows[] = {
#include "aten/AcceleratorDtypes.inc"
};

std::unordered_map<std::string, AcceleratorDtypes> build_table() {
  std::unordered_map<std::string, AcceleratorDtypes> table;
  for (const Row& row : kRows) {
    table[row.name].set_compute_type(row.dtype, row.compute);
  }
  return table;
}

} // namespace

const AcceleratorDtypes* accelerator_dtypes(std::string_view name) {
  // VDEV_ACCELERATOR_DTYPES=0 takes only what the CPU kernels take (the table's generator
  // starts from there).
  static const std::unordered_map<std::string, AcceleratorDtypes> table = [] {
    const char* setting = std::getenv("VDEV_ACCELERATOR_DTYPES");
    return setting != nullptr && std::strcmp(setting, "0") == 0
        ? std::unordered_map<std::string, AcceleratorDtypes>()
        : build_table();
  }();
  // Every overload of the family, and its in-place variant: a composite reaches the
  // out= kernel, whose table row is its functional variant's.
  const bool in_place = name.size() > 2 && name.back() == '_' && name[name.size() - 2] != '_';
  auto found = table.find(std::string(in_place ? name.substr(0, name.size() - 1) : name));
  return found == table.end() ? nullptr : &found->second;
}

c10::ScalarType narrowed_type(c10::ScalarType computed, c10::ScalarType original, c10::ScalarType compute) {
  if (computed == compute) {
    return original;
  }
  const bool complex_counterpart = c10::isComplexType(computed) && !c10::isComplexType(compute) &&
      c10::isFloatingType(compute) && c10::toComplexType(compute) == computed;
  const bool has_complex_counterpart =
      original == c10::ScalarType::Half || original == c10::ScalarType::Float || original == c10::ScalarType::Double;
  if (complex_counterpart && has_complex_counterpart) {
    return c10::toComplexType(original);
  }
  const bool real_counterpart = c10::isComplexType(compute) && c10::toRealValueType(compute) == computed;
  if (real_counterpart) {
    return c10::toRealValueType(original);
  }
  return computed;
}

} // namespace vdev
