#include "bindings/python_values.h"

namespace nb = nanobind;

namespace muser::bindings {
namespace {

nb::object array_value(const GgufArray& a) {
  nb::list out;
  if (a.elem_type == GgufType::STRING) {
    for (std::string_view s : a.strings) out.append(python_str_or_bytes(s));
  } else if (a.elem_type == GgufType::ARRAY) {
    for (const GgufValue& v : a.arrays) out.append(python_value(v));
  } else {
    for (uint64_t i = 0; i < a.count; ++i) {
      switch (a.elem_type) {
        case GgufType::F32: case GgufType::F64: out.append(nb::float_(a.float_at(i))); break;
        case GgufType::BOOL: out.append(nb::bool_(a.uint_at(i) != 0)); break;
        case GgufType::U8: case GgufType::U16: case GgufType::U32: case GgufType::U64:
          out.append(nb::int_(a.uint_at(i)));
          break;
        default: out.append(nb::int_(a.int_at(i))); break;
      }
    }
  }
  return out;
}

}  // namespace

nb::object python_str_or_bytes(std::string_view s) {
  PyObject* str = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "strict");
  if (str != nullptr) return nb::steal(str);
  PyErr_Clear();
  return nb::bytes(s.data(), s.size());
}

nb::object python_value(const GgufValue& v) {
  switch (v.type) {
    case GgufType::U8: case GgufType::U16: case GgufType::U32: case GgufType::U64:
      return nb::int_(v.as_uint);
    case GgufType::I8: case GgufType::I16: case GgufType::I32: case GgufType::I64:
      return nb::int_(v.as_int);
    case GgufType::F32: case GgufType::F64: return nb::float_(v.as_float);
    case GgufType::BOOL: return nb::bool_(v.as_bool);
    case GgufType::STRING: return python_str_or_bytes(v.as_string);
    case GgufType::ARRAY: return array_value(*v.as_array);
  }
  return nb::none();
}

nb::dict metadata_dict(const GgufFile& file) {
  nb::dict out;
  for (const auto& [key, value] : file.metadata()) out[python_str_or_bytes(key)] = python_value(value);
  return out;
}

nb::dict scheduler_stats_dict(const SchedulerStats& st) {
  nb::dict d;
  d["decode_grants"] = st.decode_grants;
  d["decode_rows"] = st.decode_rows;
  d["prefill_grants"] = st.prefill_grants;
  d["prefill_rows"] = st.prefill_rows;
  d["prefill_chunks_contended"] = st.prefill_chunks_contended;
  d["permit_wait_ns"] = st.permit_wait_ns;
  d["permit_hold_ns"] = st.permit_hold_ns;
  d["max_permit_wait_ns"] = st.max_permit_wait_ns;
  return d;
}

}  // namespace muser::bindings
