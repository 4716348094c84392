#pragma once
/// \file
/// The definitions behind detect/hardware.hpp: classifying a device by name and the batch-size
/// and cost tables. Inline in a header-only build; compiled once under
/// DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/core/error.hpp>
#include <devicekit/core/settings.hpp>
#include <devicekit/detect/hardware.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <string>

namespace devicekit {

DEVICEKIT_DECL hardware_type classify_hardware(std::string_view device_name, device_kind kind) {
  if (kind == device_kind::cpu) return hardware_type::cpu;
  std::string upper(device_name);
  std::transform(upper.begin(), upper.end(), upper.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  auto has = [&](std::string_view s) { return upper.find(s) != std::string::npos; };
  if (has("H200")) return hardware_type::h200;
  if (has("H100") || has("H800")) return hardware_type::h100;
  if (has("A100") || has("A800")) return hardware_type::a100;
  if (has("V100")) return hardware_type::v100;
  if (has("L40S")) return hardware_type::l40s;
  if (has("RTX")) return hardware_type::rtx;
  if (has("TPU V5E") || has("TPU V5 LITE")) return hardware_type::tpu_v5e;
  if (has("TPU V5P") || has("TPU V5")) return hardware_type::tpu_v5p;
  if (has("TPU V4")) return hardware_type::tpu_v4;
  return hardware_type::unknown;
}

namespace detail {
/// The source table's row for `h` (batch_size_recommendation_for adds the hardware).
inline batch_size_recommendation batch_table_row(hardware_type h) {
  switch (h) {
    case hardware_type::tpu_v5e: return {64, 256, 240, std::nullopt, "Critical batch size for reaching roofline"};
    case hardware_type::tpu_v5p: return {128, 512, 480, std::nullopt, "Higher throughput, needs larger batches"};
    case hardware_type::tpu_v4: return {64, 256, 192, std::nullopt, "Similar to v5e, slightly lower critical"};
    case hardware_type::h100: return {64, 320, 298, std::nullopt, "Critical batch size for roofline"};
    case hardware_type::h200:
      return {64, 320, 298, std::nullopt, "H100 values (same Hopper SM); not in the source table", false};
    case hardware_type::a100: return {32, 256, 240, std::nullopt, "For 80GB variant"};
    case hardware_type::v100: return {16, 128, 96, std::nullopt, "Memory-limited on 16GB variant"};
    case hardware_type::cpu: return {1, 32, 16, std::nullopt, "Memory-bandwidth bound"};
    default:
      return {16, 128, 96, std::nullopt, "V100 values as a conservative stand-in; not in the source table", false};
  }
}
}  // namespace detail

DEVICEKIT_DECL batch_size_recommendation batch_size_recommendation_for(hardware_type h) {
  batch_size_recommendation rec = detail::batch_table_row(h);
  rec.hardware = h;
  return rec;
}

namespace detail {
inline void check_tpu_allowed(hardware_type h, const hardware_table_config& c) {
  if (is_tpu(h) && !c.allow_tpu) {
    throw config_error(
        "the hardware table's TPU rows are switched off (DEVICEKIT_ALLOW_TPU=0 or "
        "hardware_table_config::allow_tpu), but " +
        std::string(to_string(h)) + " was asked for; allow TPU rows, or ask for the hardware the job runs on");
  }
}
}  // namespace detail

DEVICEKIT_DECL hardware_table_config hardware_table_config::from_environment() {
  hardware_table_config c;
  if (auto f = detail::getenv_string("DEVICEKIT_TPU_BATCH_FACTOR"); f && !f->empty()) {
    int v = 0;
    const auto [end, ec] = std::from_chars(f->data(), f->data() + f->size(), v);
    if (ec != std::errc{} || end != f->data() + f->size() || v < 1) {
      throw config_error("DEVICEKIT_TPU_BATCH_FACTOR: '" + *f + "' is not a positive integer (the default is 128)");
    }
    c.tpu_batch_factor = v;
  }
  if (auto a = detail::getenv_string("DEVICEKIT_ALLOW_TPU"); a && !a->empty()) {
    if (*a == "1" || *a == "true") {
      c.allow_tpu = true;
    } else if (*a == "0" || *a == "false") {
      c.allow_tpu = false;
    } else {
      throw config_error("DEVICEKIT_ALLOW_TPU: '" + *a + "' is not one of 1, 0, true, false");
    }
  }
  return c;
}

DEVICEKIT_DECL batch_size_recommendation batch_size_recommendation_for(hardware_type h,
                                                                       const hardware_table_config& c) {
  detail::check_tpu_allowed(h, c);
  return batch_size_recommendation_for(h);
}

DEVICEKIT_DECL batch_validation validate_batch_size(int batch_size, const batch_size_recommendation& rec,
                                                    bool warn_suboptimal) {
  const std::string hw(to_string(rec.hardware));
  if (batch_size <= 0) {
    return {false, "batch size must be positive, got " + std::to_string(batch_size)};
  }
  if (batch_size < rec.min_batch_size) {
    return {false, "batch size " + std::to_string(batch_size) + " is below the minimum " +
                       std::to_string(rec.min_batch_size) + " for " + hw};
  }
  if (rec.max_memory_batch_size && batch_size > *rec.max_memory_batch_size) {
    return {false, "batch size " + std::to_string(batch_size) + " exceeds the memory estimate " +
                       std::to_string(*rec.max_memory_batch_size) + " for " + hw +
                       " (the largest batch the given memory budget holds)"};
  }
  if (warn_suboptimal && batch_size < rec.critical_batch_size) {
    return {true, "batch size " + std::to_string(batch_size) + " is valid but below the critical batch size " +
                      std::to_string(rec.critical_batch_size) + " for " + hw +
                      " (optimal: " + std::to_string(rec.optimal_batch_size) + ")"};
  }
  return {true, "batch size " + std::to_string(batch_size) + " is suitable for " + hw};
}

DEVICEKIT_DECL batch_validation validate_batch_size(int batch_size, hardware_type h, bool warn_suboptimal) {
  return validate_batch_size(batch_size, batch_size_recommendation_for(h), warn_suboptimal);
}

DEVICEKIT_DECL batch_config batch_config_for(hardware_type h, std::int64_t base_batch_size,
                                             const hardware_table_config& table) {
  detail::check_tpu_allowed(h, table);
  batch_config c;
  c.multiplier = batch_multiplier(h, table);
  c.batch_size = round_to_power_of_two(std::max<std::int64_t>(base_batch_size, 1) * c.multiplier);
  c.max_batch_size = std::max<std::int64_t>(c.batch_size, batch_size_recommendation_for(h).optimal_batch_size);
  return c;
}

DEVICEKIT_DECL double cost_table::per_hour(hardware_type h) const {
  if (auto it = overrides_.find(h); it != overrides_.end()) return it->second;
  if (h == hardware_type::cpu) return 0.0;
  if (is_tpu(h)) return 2.0;
  return 0.5;
}

}  // namespace devicekit
