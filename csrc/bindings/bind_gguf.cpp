// The GGUF reader, exposed for tests and for Engine.metadata. Values are
// converted to Python objects on request (copies); tensor bytes are returned
// as read-only NumPy views that keep the mapping alive.
#include <nanobind/ndarray.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>

#include "bindings/bindings.h"
#include "bindings/python_values.h"
#include "core/error.h"
#include "weights/gguf_file.h"

namespace nb = nanobind;

namespace muser::bindings {

void init_gguf(nb::module_& m) {
  nb::class_<GgufFile>(m, "GgufFile",
                       "A parsed, memory-mapped GGUF file. Immutable; safe to share across threads.")
      .def_static(
          "open",
          [](const std::string& path) {
            nb::gil_scoped_release release;
            return GgufFile::open(path);
          },
          nb::arg("path"), "Map and validate a GGUF file. Raises ModelFormatError on any defect.")
      .def_prop_ro("version", &GgufFile::version)
      .def_prop_ro("alignment", &GgufFile::alignment)
      .def_prop_ro("data_offset", &GgufFile::data_offset)
      .def_prop_ro("path", &GgufFile::path)
      .def("metadata", [](const GgufFile& f) { return metadata_dict(f); },
           "All metadata as a dict (a copy). Strings that are not UTF-8 come back as bytes.")
      .def(
          "tensor_infos",
          [](const GgufFile& f) {
            nb::list out;
            for (const TensorInfo& t : f.tensors()) {
              nb::list shape;
              for (uint32_t d = 0; d < t.n_dims; ++d) shape.append(t.ne[d]);
              out.append(nb::make_tuple(python_str_or_bytes(t.name), static_cast<uint32_t>(t.type),
                                        nb::tuple(shape), t.offset, t.n_bytes));
            }
            return out;
          },
          "[(name, ggml_type_id, shape in ggml order, offset, n_bytes), ...] in file order.")
      .def(
          "tensor_bytes",
          [](nb::handle self, const std::string& name) {
            const GgufFile& f = nb::cast<const GgufFile&>(self);
            const TensorInfo* t = f.find_tensor(name);
            if (t == nullptr) throw InvalidArgument("[gguf] no tensor named '" + name + "'");
            size_t shape[1] = {static_cast<size_t>(t->n_bytes)};
            // The view's owner is the GgufFile object, so the mapping outlives it.
            return nb::ndarray<nb::numpy, const uint8_t, nb::ndim<1>>(t->data, 1, shape, self);
          },
          nb::arg("name"), "Read-only uint8 view of a tensor's raw bytes; keeps the file mapped.");
}

}  // namespace muser::bindings
