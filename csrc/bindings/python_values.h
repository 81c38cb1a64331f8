// Conversions of GGUF values to Python objects (copies).
#pragma once

#include <string_view>

#include <nanobind/nanobind.h>

#include "engine/accelerator_scheduler.h"
#include "weights/gguf_file.h"

namespace muser::bindings {

// str when `s` is valid UTF-8, else bytes.
nanobind::object python_str_or_bytes(std::string_view s);
nanobind::object python_value(const GgufValue& value);
nanobind::dict metadata_dict(const GgufFile& file);
nanobind::dict scheduler_stats_dict(const SchedulerStats& stats);

}  // namespace muser::bindings
