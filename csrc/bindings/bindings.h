// One init function per bound area; module.cpp calls them in order.
#pragma once

#include <nanobind/nanobind.h>

namespace muser::bindings {

void init_errors(nanobind::module_& m);
void init_gguf(nanobind::module_& m);
void init_tokenizer(nanobind::module_& m);

}  // namespace muser::bindings
