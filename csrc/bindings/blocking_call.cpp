#include "bindings/blocking_call.h"

#include <chrono>
#include <thread>

namespace nb = nanobind;

namespace muser::bindings {
namespace {

constexpr std::chrono::milliseconds kSignalCheckInterval{20};

bool interpreter_finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() != 0;
#else
  return _Py_IsFinalizing() != 0;
#endif
}

bool on_main_thread() {
  // Asked once (GIL held); the main thread's identity never changes.
  static const unsigned long main_ident = nb::cast<unsigned long>(
      nb::module_::import_("threading").attr("main_thread")().attr("ident"));
  return PyThread_get_thread_ident() == main_ident;
}

}  // namespace

ReleasedGil::ReleasedGil() : state_(PyEval_SaveThread()) {}

ReleasedGil::~ReleasedGil() {
  if (interpreter_finalizing()) {
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
  }
  PyEval_RestoreThread(state_);
}

PythonSignals::PythonSignals() {
  if (!on_main_thread()) return;
  // The core may ask between layers of a forward, holding the accelerator:
  // take the GIL at most every kSignalCheckInterval, so the wait for it
  // (up to a switch interval) costs the forward almost nothing.
  scope_.emplace([last = std::chrono::steady_clock::time_point{}]() mutable {
    const auto now = std::chrono::steady_clock::now();
    if (now - last < kSignalCheckInterval) return;
    last = now;
    nb::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) throw nb::python_error();
  });
}

}  // namespace muser::bindings
