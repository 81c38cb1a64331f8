// One init function per bound area; module.cpp calls them in order.
#pragma once

#include <cstddef>

#include <nanobind/nanobind.h>

namespace muser::bindings {

void init_errors(nanobind::module_& m);
void init_gguf(nanobind::module_& m);
void init_engine(nanobind::module_& m);
void init_session_files(nanobind::module_& m);
// Creates the `_testing` submodule (internals for tests and benchmarks).
void init_testing(nanobind::module_& m);
// The CUDA op entry points inside `_testing` (bind_testing_cuda.cpp).
void bind_testing_cuda(nanobind::module_& testing);
// The tokenizer's merge-queue hook inside `_testing` (bind_testing_tokenizer.cpp).
void bind_testing_tokenizer(nanobind::module_& testing);
void init_scheduler(nanobind::module_& m);
void init_schedule(nanobind::module_& m);
void init_serve(nanobind::module_& m);
void init_tokenizer(nanobind::module_& m);
// Bytes the calling thread keeps between Tokenizer.encode calls for ids
// (bind_tokenizer.cpp; for tests of the bound).
size_t kept_id_buffer_bytes();

}  // namespace muser::bindings
