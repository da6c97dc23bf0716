#include "runtime/AllocatorConfig.h"

#include <c10/util/Exception.h>

#include <cstdlib>
#include <sstream>

namespace vdev {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

std::string trim(const std::string& text) {
  const size_t first = text.find_first_not_of(" \t");
  const size_t last = text.find_last_not_of(" \t");
  return first == std::string::npos ? "" : text.substr(first, last - first + 1);
}

double parse_number(const std::string& key, const std::string& value) {
  char* end = nullptr;
  const double number = std::strtod(value.c_str(), &end);
  TORCH_CHECK(
      !value.empty() && *end == '\0', "PYTORCH_VDEV_ALLOC_CONF: ", key, " expects a number, got '",
      value, "'");
  return number;
}

bool parse_bool(const std::string& key, const std::string& value) {
  TORCH_CHECK(
      value == "True" || value == "False" || value == "true" || value == "false",
      "PYTORCH_VDEV_ALLOC_CONF: ", key, " expects True or False, got '", value, "'");
  return value == "True" || value == "true";
}

void apply(AllocatorConfig& config, const std::string& key, const std::string& value) {
  if (key == "max_split_size_mb") {
    const double megabytes = parse_number(key, value);
    // CUDA's lower bound: its large-block size.
    TORCH_CHECK(
        megabytes > 20, "PYTORCH_VDEV_ALLOC_CONF: max_split_size_mb must be more than 20, got ",
        value);
    config.max_split_size.store(static_cast<size_t>(megabytes * kMiB));
  } else if (key == "garbage_collection_threshold") {
    const double threshold = parse_number(key, value);
    TORCH_CHECK(
        threshold > 0 && threshold < 1,
        "PYTORCH_VDEV_ALLOC_CONF: garbage_collection_threshold must be between 0 and 1, got ",
        value);
    config.garbage_collection_threshold.store(threshold);
  } else if (key == "roundup_power2_divisions") {
    TORCH_CHECK(
        value.find('[') == std::string::npos,
        "PYTORCH_VDEV_ALLOC_CONF: roundup_power2_divisions takes one number on vdev, not a "
        "list per size range");
    const double divisions = parse_number(key, value);
    const auto whole = static_cast<size_t>(divisions);
    TORCH_CHECK(
        divisions >= 0 && whole == divisions && (whole & (whole - 1)) == 0,
        "PYTORCH_VDEV_ALLOC_CONF: roundup_power2_divisions must be 0 or a power of two, got ",
        value);
    config.roundup_power2_divisions.store(whole);
  } else if (key == "expandable_segments") {
    if (parse_bool(key, value)) {
      TORCH_WARN(
          "expandable_segments has no effect on ", kBackendName,
          ": its blocks never share a segment, so there is no fragmentation inside "
          "segments for expandable segments to avoid");
    }
  } else {
    TORCH_CHECK(
        false, "PYTORCH_VDEV_ALLOC_CONF: unrecognized option '", key,
        "' (vdev supports max_split_size_mb, garbage_collection_threshold, "
        "roundup_power2_divisions, expandable_segments)");
  }
}

void apply_all(AllocatorConfig& config, const std::string& settings) {
  std::istringstream options(settings);
  for (std::string option; std::getline(options, option, ',');) {
    if (trim(option).empty()) {
      continue;
    }
    const size_t colon = option.find(':');
    TORCH_CHECK(
        colon != std::string::npos, "PYTORCH_VDEV_ALLOC_CONF: expected key:value, got '", option,
        "'");
    apply(config, trim(option.substr(0, colon)), trim(option.substr(colon + 1)));
  }
}

} // namespace

AllocatorConfig& allocator_config() {
  static AllocatorConfig* config = [] {
    auto* made = new AllocatorConfig();
    if (const char* text = std::getenv("PYTORCH_VDEV_ALLOC_CONF")) {
      apply_all(*made, text);
    }
    return made;
  }();
  return *config;
}

void set_allocator_settings(const std::string& settings) {
  apply_all(allocator_config(), settings);
}

std::string allocator_settings() {
  const AllocatorConfig& config = allocator_config();
  std::ostringstream out;
  const size_t max_split = config.max_split_size.load();
  if (max_split != SIZE_MAX) {
    out << "max_split_size_mb:" << max_split / kMiB << ",";
  }
  const double threshold = config.garbage_collection_threshold.load();
  if (threshold > 0) {
    out << "garbage_collection_threshold:" << threshold << ",";
  }
  out << "roundup_power2_divisions:" << config.roundup_power2_divisions.load();
  return out.str();
}

} // namespace vdev
