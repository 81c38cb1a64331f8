// Translates the core's typed C++ errors to the Python exception classes of
// muser.errors, in one place.
#include "bindings/bindings.h"

#include <cstring>

#include "core/error.h"

namespace nb = nanobind;

namespace muser::bindings {
namespace {

void raise_with(PyObject* cls, const char* message) {
  // Decode leniently: a message must never fail to become an exception.
  PyObject* text = PyUnicode_DecodeUTF8(message, static_cast<Py_ssize_t>(std::strlen(message)), "replace");
  PyErr_SetObject(cls, text);
  Py_XDECREF(text);
}

void raise_as(const char* class_name, const char* message) {
  nb::object cls = nb::module_::import_("muser.errors").attr(class_name);
  raise_with(cls.ptr(), message);
}

}  // namespace

void init_errors(nb::module_& m) {
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const ModelFormatError& e) {
      raise_as("ModelFormatError", e.what());
    } catch (const InvalidArgument& e) {
      raise_with(PyExc_ValueError, e.what());
    } catch (const ContextOverflow& e) {
      raise_as("ContextOverflow", e.what());
    } catch (const Cancelled& e) {
      raise_as("Cancelled", e.what());
    } catch (const Overloaded& e) {
      raise_as("Overloaded", e.what());
    } catch (const Unhealthy& e) {
      raise_as("Unhealthy", e.what());
    } catch (const Timeout& e) {
      raise_with(PyExc_TimeoutError, e.what());
    } catch (const DeviceMemoryError& e) {
      raise_as("DeviceMemoryError", e.what());
    } catch (const InternalError& e) {
      raise_as("InternalError", e.what());
    }
  });
}

}  // namespace muser::bindings
