// Helpers for bindings of blocking core calls (used instead of a bare
// nb::gil_scoped_release where a call can block for long).
//
// ReleasedGil: releases the GIL like nb::gil_scoped_release, but a thread
// that comes back after the interpreter began finalizing never re-takes it:
// re-taking it then ends the thread with a forced unwind that meets
// noexcept frames and aborts the process. Such a thread parks instead and
// dies with the process. (The atexit hook in muser.generation cancels and
// joins our own threads before finalization, so this is the last line.)
//
// PythonSignals: on the interpreter's main thread, installs an
// InterruptScope (core/interrupt.h) whose check re-takes the GIL briefly and
// runs PyErr_CheckSignals, so Ctrl-C stops a long prefill or admission wait
// at its next chunk boundary / wake-up with KeyboardInterrupt. Construct it
// with the GIL held, before releasing it; other threads get no scope (Python
// runs signal handlers on the main thread only).
#pragma once

#include <optional>

#include <nanobind/nanobind.h>

#include "core/interrupt.h"

namespace muser::bindings {

class ReleasedGil {
 public:
  ReleasedGil();
  ~ReleasedGil();
  ReleasedGil(const ReleasedGil&) = delete;
  ReleasedGil& operator=(const ReleasedGil&) = delete;

 private:
  PyThreadState* state_;
};

class PythonSignals {
 public:
  PythonSignals();

 private:
  std::optional<InterruptScope> scope_;
};

}  // namespace muser::bindings
