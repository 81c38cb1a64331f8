// Translates the core's typed C++ errors to the Python exception classes of
// muser.errors, in one place.
#include "bindings/bindings.h"

#include "core/error.h"

namespace nb = nanobind;

namespace muser::bindings {
namespace {

void raise_as(const char* class_name, const char* message) {
  nb::object errors = nb::module_::import_("muser.errors");
  nb::object cls = errors.attr(class_name);
  PyErr_SetString(cls.ptr(), message);
}

}  // namespace

void init_errors(nb::module_& m) {
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const ModelFormatError& e) {
      raise_as("ModelFormatError", e.what());
    } catch (const InvalidArgument& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const ContextOverflow& e) {
      raise_as("ContextOverflow", e.what());
    } catch (const Cancelled& e) {
      raise_as("Cancelled", e.what());
    } catch (const Overloaded& e) {
      raise_as("Overloaded", e.what());
    } catch (const Unhealthy& e) {
      raise_as("Unhealthy", e.what());
    } catch (const InternalError& e) {
      raise_as("InternalError", e.what());
    }
  });
}

}  // namespace muser::bindings
