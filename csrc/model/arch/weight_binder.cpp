#include "model/arch/weight_binder.h"

#include "core/error.h"

namespace muser {
namespace {

[[noreturn]] void fail(const std::string& what) { throw ModelFormatError(format_where("weights", what)); }

std::string shape_string(const uint64_t* dims, uint32_t n) {
  std::string s = "[";
  for (uint32_t i = 0; i < n; ++i) {
    if (i) s += ", ";
    s += std::to_string(dims[i]);
  }
  return s + "]";
}

}  // namespace

const TensorInfo* WeightBinder::require(const std::string& name, const uint64_t* dims, uint32_t n_dims) const {
  const TensorInfo* t = file_.find_tensor(name);
  if (t == nullptr) fail("missing tensor '" + name + "': expected shape " + shape_string(dims, n_dims));
  bool same = t->n_dims == n_dims;
  for (uint32_t i = 0; same && i < n_dims; ++i) same = t->ne[i] == dims[i];
  if (!same) {
    fail("tensor '" + name + "': expected shape " + shape_string(dims, n_dims) + ", got " +
         shape_string(t->ne.data(), t->n_dims));
  }
  return t;
}

uint32_t WeightBinder::add(const TensorInfo& t, uint32_t n_dims) {
  WeightDesc w;
  w.name = std::string(t.name);
  w.type = t.type;
  w.n_dims = n_dims;
  w.ne[0] = t.ne[0];
  w.ne[1] = n_dims == 2 ? t.ne[1] : 1;
  w.data = t.data;
  w.n_bytes = static_cast<size_t>(t.n_bytes);
  return table_.add(w);
}

uint32_t WeightBinder::matrix(const std::string& name, uint64_t n_in, uint64_t n_out) {
  const uint64_t dims[2] = {n_in, n_out};
  return add(*require(name, dims, 2), 2);
}

uint32_t WeightBinder::vector(const std::string& name, uint64_t n) {
  const uint64_t dims[1] = {n};
  const TensorInfo* t = require(name, dims, 1);
  if (t->type != DType::F32 && t->type != DType::F16 && t->type != DType::BF16) {
    fail("tensor '" + name + "': expected type F32, F16 or BF16, got " +
         ggml_type_name(static_cast<uint32_t>(t->type)));
  }
  return add(*t, 1);
}

uint32_t WeightBinder::optional_vector(const std::string& name, uint64_t n) {
  return has(name) ? vector(name, n) : kNoWeight;
}

}  // namespace muser
