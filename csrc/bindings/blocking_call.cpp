#include "bindings/blocking_call.h"

#include <atomic>
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
  // The main thread's identity never changes: asked of Python (GIL held)
  // until known. Not a static initialized by those calls: Python may hand
  // the GIL to another thread inside them, and a second thread reaching the
  // static's guard would wait there holding the GIL, which the first needs
  // to finish (three generations starting at once in examples/asyncio_app.py
  // deadlocked so). Threads that ask at once each compute the same value.
  static std::atomic<unsigned long> main_ident{0};
  unsigned long ident = main_ident.load(std::memory_order_relaxed);
  if (ident == 0) {
    ident = nb::cast<unsigned long>(nb::module_::import_("threading").attr("main_thread")().attr("ident"));
    main_ident.store(ident, std::memory_order_relaxed);
  }
  return PyThread_get_thread_ident() == ident;
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
