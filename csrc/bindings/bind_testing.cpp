// `_core._testing`: internals exposed for tests and benchmarks only (not a
// public API; names may change). Each area keeps its functions in its own
// bind_testing_<area> function below. Compute calls release the GIL; inputs
// are copied into owned, aligned buffers; results are new NumPy arrays that
// own their memory.
#include <nanobind/ndarray.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <ctime>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/kernel_set.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/ops_norm.h"
#include "backend/cpu/vec_f16.h"
#include "bindings/bindings.h"
#include "bindings/host_arrays.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "tensor/dtype.h"
#include "tensor/half_float.h"
#include "tensor/reference_kernels.h"

namespace nb = nanobind;

namespace muser::bindings {
namespace {

// ---------------------------------------------------------------------------
// CPU kernels and thread pool (branch `kernels`).

// CPU seconds this process has used, all threads (std::clock: the process
// CPU clock on Linux and macOS).
double process_cpu_seconds() { return static_cast<double>(std::clock()) / CLOCKS_PER_SEC; }

// Heap buffer aligned for any SIMD load, returned to NumPy without a copy.
template <typename T>
struct OwnedArray {
  T* data = nullptr;
  size_t count = 0;

  explicit OwnedArray(size_t n) : count(n) {
    data = static_cast<T*>(::operator new[](std::max<size_t>(n, 1) * sizeof(T), std::align_val_t(64)));
  }
  ~OwnedArray() {
    if (data != nullptr) ::operator delete[](data, std::align_val_t(64));
  }
  OwnedArray(OwnedArray&& other) noexcept : data(other.data), count(other.count) { other.data = nullptr; }
  OwnedArray(const OwnedArray&) = delete;
  OwnedArray& operator=(const OwnedArray&) = delete;
  OwnedArray& operator=(OwnedArray&&) = delete;

  // Hands the memory to a NumPy array (ndim 1 or 2); this object no longer owns it.
  nb::ndarray<nb::numpy, T> release_to_numpy(std::initializer_list<size_t> shape) {
    T* p = data;
    data = nullptr;
    nb::capsule owner(p, [](void* q) noexcept { ::operator delete[](static_cast<T*>(q), std::align_val_t(64)); });
    return nb::ndarray<nb::numpy, T>(p, shape.size(), shape.begin(), owner);
  }
};

const DTypeInfo& require_dtype(uint32_t type_id) {
  const DTypeInfo* info = find_dtype(type_id);
  if (info == nullptr) {
    throw InvalidArgument(format_where("testing", "unsupported type id " + std::to_string(type_id) +
                                                      " (" + ggml_type_name(type_id) + ")"));
  }
  return *info;
}

void require_block_multiple(const DTypeInfo& info, size_t n) {
  if (n == 0 || n % info.block_elems != 0) {
    throw InvalidArgument(format_where(
        "testing", std::string(info.name) + " row length must be a positive multiple of " +
                       std::to_string(info.block_elems) + ", got " + std::to_string(n)));
  }
}

// Copies `raw` into an aligned buffer after checking it holds exactly `rows`
// rows of `n` elements.
OwnedArray<uint8_t> copy_weight(const DTypeInfo& info, const Bytes1D& raw, size_t n, size_t rows) {
  require_block_multiple(info, n);
  const size_t expected = static_cast<size_t>(row_bytes(info.type, n)) * rows;
  if (raw.shape(0) != expected) {
    throw InvalidArgument(format_where(
        "testing", std::string(info.name) + " data for " + std::to_string(rows) + " x " +
                       std::to_string(n) + " elements must be " + std::to_string(expected) +
                       " bytes, got " + std::to_string(raw.shape(0))));
  }
  OwnedArray<uint8_t> copy(expected);
  if (expected > 0) std::memcpy(copy.data, raw.data(), expected);
  return copy;
}

ActivationFormat parse_activation_format(const std::string& name) {
  for (ActivationFormat f : {ActivationFormat::F32, ActivationFormat::Q8_0, ActivationFormat::Q8_1,
                             ActivationFormat::Q8_K}) {
    if (name == activation_format_name(f)) return f;
  }
  throw InvalidArgument(format_where(
      "testing", "activation format must be F32, Q8_0, Q8_1 or Q8_K, got '" + name + "'"));
}

TensorInfo make_tensor(const DTypeInfo& info, const OwnedArray<uint8_t>& bytes, size_t ne0, size_t ne1) {
  TensorInfo t;
  t.name = "testing";
  t.type = info.type;
  t.n_dims = 2;
  t.ne = {ne0, ne1, 1, 1};
  t.n_bytes = bytes.count;
  t.data = bytes.data;
  return t;
}

// The weight repacked as the engine does at load, when `packed` asks for it
// and the table has a packed layout for its type; null otherwise.
std::unique_ptr<cpu::PackedWeight> pack_if_asked(bool packed, const TensorInfo& w, const cpu::KernelSet& kernels,
                                                 ThreadPool& pool) {
  if (!packed || !cpu::has_packed_layout(kernels, w.type)) return nullptr;
  return std::make_unique<cpu::PackedWeight>(w, kernels, pool);
}

// cpu::matmul with the split planned for plan_threads threads (0: the
// pool's) and, unless split_rows, with every task over all rows.
void run_planned(const TensorInfo& w, const cpu::KernelSet& kernels, const cpu::PackedWeight* pack,
                 const float* x, size_t n_rows, float* y, ThreadPool& pool, size_t plan_threads,
                 bool split_rows) {
  const size_t threads = plan_threads != 0 ? plan_threads : static_cast<size_t>(pool.size());
  cpu::run_matmul(cpu::MatmulJob::plan(w, kernels, threads, pack, split_rows ? n_rows : 0), x, n_rows, y, pool);
}

const cpu::F16VecOps& f16_vec_table(const std::string& name) {
  for (const cpu::F16VecOps* ops : cpu::supported_f16_vec_ops()) {
    if (name == ops->isa) return *ops;
  }
  throw InvalidArgument(format_where("testing", "no attention vector table '" + name + "' on this machine"));
}

void bind_testing_kernels(nb::module_& m) {
  m.def(
      "cpu_isas",
      [] {
        std::vector<std::string> names;
        for (cpu::Isa isa : cpu::kAllIsas) {
          if (cpu::isa_supported(isa)) names.emplace_back(cpu::isa_name(isa));
        }
        return names;
      },
      "Instruction sets whose CPU kernels this machine runs, slowest first.");
  m.def("best_isa", [] { return std::string(cpu::isa_name(cpu::best_isa())); },
        "The instruction set matmul uses by default on this machine.");
  m.def("gemv_streams", [] { return cpu::gemv_streams(); },
        "Weight groups the packed decode-sized kernels read side by side on this machine.");
  m.def("set_gemv_streams", [](size_t streams) { return cpu::set_gemv_streams(streams); }, nb::arg("streams"),
        "Sets gemv_streams() for the whole process (1..4; 0 restores this CPU's default) and returns the "
        "previous value. Engines plan their chunks when a step shape is first seen, so set it before loading "
        "one. Results never depend on it.");

  m.def(
      "dequantize",
      [](uint32_t type_id, const Bytes1D& raw, size_t n_elements) {
        const DTypeInfo& info = require_dtype(type_id);
        OwnedArray<uint8_t> src = copy_weight(info, raw, n_elements, 1);
        OwnedArray<float> out(n_elements);
        {
          nb::gil_scoped_release release;
          ref::dequantize_row(info.type, src.data, out.data, n_elements);
        }
        return out.release_to_numpy({n_elements});
      },
      nb::arg("type_id"), nb::arg("raw"), nb::arg("n_elements"),
      "Scalar reference dequantization of one row of `n_elements` (a block multiple).");

  m.def(
      "dequantize_rows",
      [](uint32_t type_id, const Bytes1D& raw, size_t ne0, size_t ne1, std::vector<int32_t> row_ids) {
        const DTypeInfo& info = require_dtype(type_id);
        OwnedArray<uint8_t> src = copy_weight(info, raw, ne0, ne1);
        const TensorInfo w = make_tensor(info, src, ne0, ne1);
        OwnedArray<float> out(row_ids.size() * ne0);
        {
          nb::gil_scoped_release release;
          cpu::dequantize_rows(w, row_ids.data(), row_ids.size(), out.data);
        }
        return out.release_to_numpy({row_ids.size(), ne0});
      },
      nb::arg("type_id"), nb::arg("raw"), nb::arg("ne0"), nb::arg("ne1"), nb::arg("row_ids"),
      "cpu::dequantize_rows (the embedding lookup) on a (ne1, ne0) tensor.");

  m.def(
      "activation_format",
      [](uint32_t type_id) {
        return std::string(activation_format_name(activation_format(require_dtype(type_id).type)));
      },
      nb::arg("type_id"), "Activation format ('F32', 'Q8_0', 'Q8_1', 'Q8_K') paired with a weight type.");

  m.def(
      "quantize_activation",
      [](const std::string& format_name, const Floats1D& x, const std::string& isa_name) {
        const ActivationFormat format = parse_activation_format(format_name);
        const cpu::KernelSet& kernels = cpu::testing_kernel_set(isa_name.c_str());
        const size_t n = x.shape(0);
        if (n == 0 || n % activation_block_elems(format) != 0) {
          throw InvalidArgument(format_where(
              "testing", format_name + " activation length must be a positive multiple of " +
                             std::to_string(activation_block_elems(format)) + ", got " +
                             std::to_string(n)));
        }
        OwnedArray<uint8_t> out(activation_row_bytes(format, n));
        {
          nb::gil_scoped_release release;
          kernels.quantize[static_cast<uint32_t>(format)](x.data(), out.data, n);
        }
        return out.release_to_numpy({out.count});
      },
      nb::arg("format"), nb::arg("x"), nb::arg("isa") = "scalar",
      "Raw bytes of the activation blocks for float32 row `x`, quantized by the kernel table "
      "of `isa` (scalar = the reference).");

  m.def(
      "vec_dot",
      [](uint32_t type_id, const Bytes1D& raw_w, const Floats1D& x, const std::string& isa_name) {
        const DTypeInfo& info = require_dtype(type_id);
        const cpu::KernelSet& kernels = cpu::testing_kernel_set(isa_name.c_str());
        if (kernels.tile[type_id] == nullptr) {
          throw InvalidArgument(format_where("testing", std::string("no ") + isa_name + " kernel for " + info.name));
        }
        const size_t n = x.shape(0);
        OwnedArray<uint8_t> w = copy_weight(info, raw_w, n, 1);
        const ActivationFormat format = activation_format(info.type);
        OwnedArray<uint8_t> act(activation_row_bytes(format, n));
        float result = 0.0f;
        {
          nb::gil_scoped_release release;
          kernels.quantize[static_cast<uint32_t>(format)](x.data(), act.data, n);
          kernels.tile[type_id](n, w.data, w.count, 1, act.data, act.count, 1, &result, 1);
        }
        return result;
      },
      nb::arg("type_id"), nb::arg("raw_w"), nb::arg("x"), nb::arg("isa") = "scalar",
      "Dot product of one weight row with float32 `x` (quantized to the type's activation "
      "format first) using the kernel table of `isa`.");

  m.def(
      "matmul",
      [](uint32_t type_id, const Bytes1D& raw, size_t ne0, size_t ne1, const Floats2D& x,
         int threads, const std::string& isa_name, bool packed, size_t plan_threads, bool split_rows) {
        const DTypeInfo& info = require_dtype(type_id);
        const cpu::KernelSet& kernels = cpu::testing_kernel_set(isa_name.c_str());
        OwnedArray<uint8_t> src = copy_weight(info, raw, ne0, ne1);
        if (x.shape(1) != ne0) {
          throw InvalidArgument(format_where("testing", "x must have " + std::to_string(ne0) +
                                                            " columns, got " + std::to_string(x.shape(1))));
        }
        const TensorInfo w = make_tensor(info, src, ne0, ne1);
        const size_t n_rows = x.shape(0);
        OwnedArray<float> y(n_rows * ne1);
        {
          nb::gil_scoped_release release;
          ThreadPool pool(threads);
          const std::unique_ptr<cpu::PackedWeight> pack = pack_if_asked(packed, w, kernels, pool);
          run_planned(w, kernels, pack.get(), x.data(), n_rows, y.data, pool, plan_threads, split_rows);
        }
        return y.release_to_numpy({n_rows, ne1});
      },
      nb::arg("type_id"), nb::arg("raw"), nb::arg("ne0"), nb::arg("ne1"), nb::arg("x"),
      nb::arg("threads") = 1, nb::arg("isa") = "best", nb::arg("packed") = true, nb::arg("plan_threads") = 0,
      nb::arg("split_rows") = true,
      "y = x @ W.T for a (ne1, ne0) weight of `type_id`, via cpu::matmul on a fresh pool; with "
      "`packed` the weight is first repacked as the engine does at load when `isa` has a packed "
      "layout for the type (see has_packed_layout). `plan_threads` (0: `threads`) splits the "
      "work into the tasks it would get on that many threads; `split_rows=False` keeps every "
      "task over all rows (the split before row blocks).");

  m.def(
      "f16_vec_isas",
      [] {
        std::vector<std::string> names;
        for (const cpu::F16VecOps* ops : cpu::supported_f16_vec_ops()) names.emplace_back(ops->isa);
        return names;
      },
      "Names of the attention vector tables (cpu::F16VecOps) this machine runs, slowest first.");
  m.def(
      "f16_vec_dot_rows",
      [](const std::string& isa_name, const Floats1D& q, const U16s2D& keys, float scale, bool composed) {
        const cpu::F16VecOps& ops = f16_vec_table(isa_name);
        const size_t n = q.shape(0);
        if (keys.shape(1) != n) {
          throw InvalidArgument(format_where("testing", "keys must have " + std::to_string(n) + " columns"));
        }
        const size_t rows = keys.shape(0);
        OwnedArray<float> out(rows);
        {
          nb::gil_scoped_release release;
          if (composed) {
            std::vector<float> key(n);
            for (size_t r = 0; r < rows; ++r) {
              ops.to_f32(keys.data() + r * n, key.data(), n);
              out.data[r] = ops.dot(q.data(), key.data(), n) * scale;
            }
          } else {
            ops.dot_rows(q.data(), keys.data(), n, rows, n, scale, out.data);
          }
        }
        return out.release_to_numpy({rows});
      },
      nb::arg("isa"), nb::arg("q"), nb::arg("keys"), nb::arg("scale"), nb::arg("composed"),
      "Scores q . f32(keys[r]) * scale by the table's dot_rows, or (composed) to_f32 then dot per row.");
  m.def(
      "f16_vec_axpy_rows",
      [](const std::string& isa_name, const Floats1D& y, const Floats1D& w, const U16s2D& values, bool composed) {
        const cpu::F16VecOps& ops = f16_vec_table(isa_name);
        const size_t n = y.shape(0);
        const size_t rows = values.shape(0);
        if (values.shape(1) != n || w.shape(0) != rows) {
          throw InvalidArgument(format_where("testing", "values must be (len(w), len(y))"));
        }
        OwnedArray<float> out(n);
        std::copy(y.data(), y.data() + n, out.data);
        {
          nb::gil_scoped_release release;
          if (composed) {
            std::vector<float> value(n);
            for (size_t r = 0; r < rows; ++r) {
              ops.to_f32(values.data() + r * n, value.data(), n);
              ops.axpy(out.data, w.data()[r], value.data(), n);
            }
          } else {
            ops.axpy_rows(out.data, w.data(), values.data(), n, rows, n);
          }
        }
        return out.release_to_numpy({n});
      },
      nb::arg("isa"), nb::arg("y"), nb::arg("w"), nb::arg("values"), nb::arg("composed"),
      "y + sum_r w[r] * f32(values[r]) in ascending r by the table's axpy_rows, or (composed) to_f32 then axpy per row.");
  m.def(
      "f16_vec_dot_rows_f32",
      [](const std::string& isa_name, const Floats1D& q, const Floats2D& keys, float scale) {
        const cpu::F16VecOps& ops = f16_vec_table(isa_name);
        const size_t n = q.shape(0);
        if (keys.shape(1) != n) {
          throw InvalidArgument(format_where("testing", "keys must have " + std::to_string(n) + " columns"));
        }
        const size_t rows = keys.shape(0);
        OwnedArray<float> out(rows);
        {
          nb::gil_scoped_release release;
          ops.dot_rows_f32(q.data(), keys.data(), n, rows, n, scale, out.data);
        }
        return out.release_to_numpy({rows});
      },
      nb::arg("isa"), nb::arg("q"), nb::arg("keys"), nb::arg("scale"),
      "Scores q . keys[r] * scale by the table's dot_rows_f32 (keys already float32).");
  m.def(
      "f16_vec_axpy_rows_f32",
      [](const std::string& isa_name, const Floats2D& ys, const Floats2D& ws, const Floats2D& values) {
        const cpu::F16VecOps& ops = f16_vec_table(isa_name);
        const size_t n_y = ys.shape(0), n = ys.shape(1);
        const size_t rows = values.shape(0);
        if (values.shape(1) != n || ws.shape(0) != n_y || ws.shape(1) != rows) {
          throw InvalidArgument(format_where("testing", "values must be (rows, n) for ys (k, n) and ws (k, rows)"));
        }
        OwnedArray<float> out(n_y * n);
        std::copy(ys.data(), ys.data() + n_y * n, out.data);
        {
          nb::gil_scoped_release release;
          std::vector<float*> y_rows(n_y);
          std::vector<const float*> w_rows(n_y);
          for (size_t j = 0; j < n_y; ++j) {
            y_rows[j] = out.data + j * n;
            w_rows[j] = ws.data() + j * rows;
          }
          ops.axpy_rows_f32(y_rows.data(), w_rows.data(), n_y, values.data(), n, rows, n);
        }
        return out.release_to_numpy({n_y, n});
      },
      nb::arg("isa"), nb::arg("ys"), nb::arg("ws"), nb::arg("values"),
      "ys[j] + sum_r ws[j, r] * values[r] in ascending r for every j, by the table's axpy_rows_f32 in one "
      "call (values already float32).");
  m.def(
      "cpu_rms_norm_rows",
      [](const Floats2D& x, const Floats1D& w, float eps, size_t first, size_t count) {
        const size_t rows = x.shape(0), n = x.shape(1);
        if (w.shape(0) != n) throw InvalidArgument(format_where("testing", "w must have one weight per column"));
        if (first > rows || count > rows - first) {
          throw InvalidArgument(format_where("testing", "rows [first, first + count) must lie within x"));
        }
        OwnedArray<float> out(rows * n);
        std::fill(out.data, out.data + rows * n, 0.0f);
        {
          nb::gil_scoped_release release;
          cpu::rms_norm_rows(x.data() + first * n, n, w.data(), n, eps, out.data + first * n, n, count);
        }
        return out.release_to_numpy({rows, n});
      },
      nb::arg("x"), nb::arg("w"), nb::arg("eps"), nb::arg("first"), nb::arg("count"),
      "The CPU backend's RMSNorm (cpu::rms_norm_rows) of rows first..first+count-1 of x in one call; "
      "other rows of the result are 0.");
  m.def(
      "f16_vec_softmax",
      [](const std::string& isa_name, const Floats1D& x) {
        const cpu::F16VecOps& ops = f16_vec_table(isa_name);
        const size_t n = x.shape(0);
        OwnedArray<float> out(n);
        std::copy(x.data(), x.data() + n, out.data);
        {
          nb::gil_scoped_release release;
          ops.softmax(out.data, n);
        }
        return out.release_to_numpy({n});
      },
      nb::arg("isa"), nb::arg("x"), "softmax(x) by the table's `softmax` (the attention weights).");

  m.def(
      "has_packed_layout",
      [](uint32_t type_id, const std::string& isa_name) {
        const DTypeInfo& info = require_dtype(type_id);
        return cpu::has_packed_layout(cpu::testing_kernel_set(isa_name.c_str()), info.type);
      },
      nb::arg("type_id"), nb::arg("isa") = "best",
      "Whether the kernel table of `isa` repacks weights of `type_id` at load.");

  m.def(
      "matmul_split",
      [](uint32_t type_id, const Bytes1D& raw, size_t ne0, size_t ne1, size_t n_rows, size_t threads,
         const std::string& isa_name, bool packed, bool shares_stage) {
        const DTypeInfo& info = require_dtype(type_id);
        const cpu::KernelSet& kernels = cpu::testing_kernel_set(isa_name.c_str());
        OwnedArray<uint8_t> src = copy_weight(info, raw, ne0, ne1);
        const TensorInfo w = make_tensor(info, src, ne0, ne1);
        ThreadPool pool(1);
        const std::unique_ptr<cpu::PackedWeight> pack = pack_if_asked(packed, w, kernels, pool);
        const cpu::MatmulJob job = cpu::MatmulJob::plan(w, kernels, threads, pack.get(), n_rows, shares_stage);
        nb::dict out;
        out["tasks"] = job.n_chunks;
        out["chunk"] = job.chunk;
        out["row_block"] = job.row_block == 0 ? n_rows : job.row_block;
        out["tail_first"] = job.tail_first;
        out["tail_chunk"] = job.tail_chunk;
        return out;
      },
      nb::arg("type_id"), nb::arg("raw"), nb::arg("ne0"), nb::arg("ne1"), nb::arg("n_rows"), nb::arg("threads"),
      nb::arg("isa") = "best", nb::arg("packed") = true, nb::arg("shares_stage") = false,
      "How cpu::matmul splits n_rows rows on `threads` threads (`shares_stage`: planned as one of several "
      "matmuls of a CPU plan stage): {'tasks', 'chunk' (outputs per "
      "task), 'row_block' (activation rows per task; the last block takes the rest), 'tail_first', "
      "'tail_chunk' (tasks from tail_first on cover tail_chunk outputs each after tail_first chunks; "
      "tail_chunk 0: none)}.");

  m.def(
      "time_matmul",
      [](uint32_t type_id, const Bytes1D& raw, size_t ne0, size_t ne1, const Floats2D& x,
         int threads, const std::string& isa_name, int repeats, bool packed, size_t plan_threads,
         bool split_rows, bool cpu_clock) {
        const DTypeInfo& info = require_dtype(type_id);
        const cpu::KernelSet& kernels = cpu::testing_kernel_set(isa_name.c_str());
        OwnedArray<uint8_t> src = copy_weight(info, raw, ne0, ne1);
        if (x.shape(1) != ne0) {
          throw InvalidArgument(format_where("testing", "x must have " + std::to_string(ne0) +
                                                            " columns, got " + std::to_string(x.shape(1))));
        }
        if (repeats < 1) throw InvalidArgument(format_where("testing", "repeats must be >= 1"));
        const TensorInfo w = make_tensor(info, src, ne0, ne1);
        const size_t n_rows = x.shape(0);
        OwnedArray<float> y(n_rows * ne1);
        std::vector<double> seconds;
        {
          nb::gil_scoped_release release;
          ThreadPool pool(threads);
          const std::unique_ptr<cpu::PackedWeight> pack = pack_if_asked(packed, w, kernels, pool);
          const auto run = [&] {
            run_planned(w, kernels, pack.get(), x.data(), n_rows, y.data, pool, plan_threads, split_rows);
          };
          run();  // warm-up
          for (int i = 0; i < repeats; ++i) {
            if (cpu_clock) {
              const double start = process_cpu_seconds();
              run();
              seconds.push_back(process_cpu_seconds() - start);
              continue;
            }
            const auto start = std::chrono::steady_clock::now();
            run();
            seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
          }
        }
        return seconds;
      },
      nb::arg("type_id"), nb::arg("raw"), nb::arg("ne0"), nb::arg("ne1"), nb::arg("x"),
      nb::arg("threads"), nb::arg("isa"), nb::arg("repeats"), nb::arg("packed") = true,
      nb::arg("plan_threads") = 0, nb::arg("split_rows") = true, nb::arg("cpu_clock") = false,
      "Seconds per cpu::matmul call (one pool, one warm-up call first; the weight repacked "
      "beforehand as at load when `packed` and the table has a layout for it), for benchmarks. "
      "`plan_threads` and `split_rows` as for matmul. `cpu_clock`: the process's CPU seconds "
      "per call (all threads, the pool's spinning included) instead of wall seconds, which on "
      "a shared machine count other processes' turns too.");

  m.def(
      "fp32_to_fp16",
      [](const Floats1D& x) {
        OwnedArray<uint16_t> out(x.shape(0));
        for (size_t i = 0; i < x.shape(0); ++i) out.data[i] = fp32_to_fp16(x.data()[i]);
        return out.release_to_numpy({x.shape(0)});
      },
      nb::arg("x"), "Raw binary16 bits of each float (round to nearest even), portable path.");
  m.def(
      "fp16_to_fp32",
      [](const U16s1D& h) {
        OwnedArray<float> out(h.shape(0));
        for (size_t i = 0; i < h.shape(0); ++i) out.data[i] = fp16_to_fp32(h.data()[i]);
        return out.release_to_numpy({h.shape(0)});
      },
      nb::arg("bits"), "Floats of raw binary16 bit patterns, portable path.");
  m.def(
      "fp32_to_bf16",
      [](const Floats1D& x) {
        OwnedArray<uint16_t> out(x.shape(0));
        for (size_t i = 0; i < x.shape(0); ++i) out.data[i] = fp32_to_bf16(x.data()[i]);
        return out.release_to_numpy({x.shape(0)});
      },
      nb::arg("x"), "Raw bfloat16 bits of each float (round to nearest even).");
}

// A ThreadPool for tests: each method runs one parallel_for and reports what
// the tasks saw.
class PoolProbe {
 public:
  explicit PoolProbe(int n_threads) : pool_(n_threads) {}

  int size() const { return pool_.size(); }

  // How many times each task index ran.
  std::vector<int> run_counts(size_t n_tasks) {
    std::unique_ptr<std::atomic<int>[]> counts(new std::atomic<int>[n_tasks]());
    {
      nb::gil_scoped_release release;
      pool_.parallel_for(n_tasks, [&](size_t i, int) { counts[i].fetch_add(1); });
    }
    std::vector<int> out(n_tasks);
    for (size_t i = 0; i < n_tasks; ++i) out[i] = counts[i].load();
    return out;
  }

  // Per task: whether it ran on the calling OS thread, and its thread index.
  std::vector<std::pair<bool, int>> run_placement(size_t n_tasks) {
    std::vector<std::pair<bool, int>> out(n_tasks);
    const std::thread::id caller = std::this_thread::get_id();
    {
      nb::gil_scoped_release release;
      pool_.parallel_for(n_tasks, [&](size_t i, int thread) {
        out[i] = {std::this_thread::get_id() == caller, thread};
      });
    }
    return out;
  }

  // Tasks listed in `failing` throw InvalidArgument("task <i> failed"); the
  // rest count themselves. Returns the counts if nothing was thrown.
  std::vector<int> run_failing(size_t n_tasks, const std::vector<size_t>& failing) {
    std::unique_ptr<std::atomic<int>[]> counts(new std::atomic<int>[n_tasks]());
    std::vector<char> fails(n_tasks, 0);
    for (size_t i : failing) {
      if (i < n_tasks) fails[i] = 1;
    }
    last_counts_.assign(n_tasks, 0);
    try {
      nb::gil_scoped_release release;
      pool_.parallel_for(n_tasks, [&](size_t i, int) {
        counts[i].fetch_add(1);
        if (fails[i]) throw InvalidArgument("task " + std::to_string(i) + " failed");
      });
    } catch (...) {
      for (size_t i = 0; i < n_tasks; ++i) last_counts_[i] = counts[i].load();
      throw;
    }
    for (size_t i = 0; i < n_tasks; ++i) last_counts_[i] = counts[i].load();
    return last_counts_;
  }

  // The per-task run counts of the last run_failing call (also after it raised).
  const std::vector<int>& last_counts() const { return last_counts_; }

 private:
  ThreadPool pool_;
  std::vector<int> last_counts_;
};

void bind_testing_thread_pool(nb::module_& m) {
  nb::class_<PoolProbe>(m, "ThreadPoolProbe",
                        "A muser::ThreadPool plus probes of what its tasks saw. Not thread-safe.")
      .def(nb::init<int>(), nb::arg("n_threads"))
      .def_prop_ro("size", &PoolProbe::size)
      .def("run_counts", &PoolProbe::run_counts, nb::arg("n_tasks"))
      .def("run_placement", &PoolProbe::run_placement, nb::arg("n_tasks"))
      .def("run_failing", &PoolProbe::run_failing, nb::arg("n_tasks"), nb::arg("failing"))
      .def_prop_ro("last_counts", &PoolProbe::last_counts);
  m.def("physical_core_count", &physical_core_count,
        "Physical cores this process may run on (SMT siblings counted once).");
}

}  // namespace

namespace {

const cpu::F16VecOps& f16_table(const std::string& name) {
  if (name == "scalar") return cpu::scalar_f16_vec_ops();
  if (name == "best") return cpu::f16_vec_ops();
  throw InvalidArgument(format_where("testing", "f16 table must be 'scalar' or 'best', got '" + name + "'"));
}

void bind_testing_attention(nb::module_& m) {
  m.def(
      "f16_rows",
      [](const std::string& table, const Floats1D& q, const U16s1D& rows_bits, size_t stride, size_t rows,
         float scale, const Floats1D& weights) {
        const cpu::F16VecOps& ops = f16_table(table);
        const size_t n = q.shape(0);
        if (n == 0 || rows == 0 || stride < n || rows_bits.shape(0) < (rows - 1) * stride + n ||
            weights.shape(0) < rows) {
          throw InvalidArgument(format_where(
              "testing", "f16_rows needs n >= 1, rows >= 1, stride >= n, (rows - 1) * stride + n row "
                         "elements and `rows` weights"));
        }
        OwnedArray<float> fused_scores(rows), composed_scores(rows), fused_sum(n), composed_sum(n);
        {
          nb::gil_scoped_release release;
          const uint16_t* bits = rows_bits.data();
          std::vector<float> row(n);
          std::fill(fused_sum.data, fused_sum.data + n, 0.0f);
          std::fill(composed_sum.data, composed_sum.data + n, 0.0f);
          ops.dot_rows(q.data(), bits, stride, rows, n, scale, fused_scores.data);
          ops.axpy_rows(fused_sum.data, weights.data(), bits, stride, rows, n);
          for (size_t r = 0; r < rows; ++r) {
            ops.to_f32(bits + r * stride, row.data(), n);
            composed_scores.data[r] = ops.dot(q.data(), row.data(), n) * scale;
            ops.axpy(composed_sum.data, weights.data()[r], row.data(), n);
          }
        }
        return nb::make_tuple(fused_scores.release_to_numpy({rows}), composed_scores.release_to_numpy({rows}),
                              fused_sum.release_to_numpy({n}), composed_sum.release_to_numpy({n}));
      },
      nb::arg("table"), nb::arg("q"), nb::arg("rows_bits"), nb::arg("stride"), nb::arg("rows"), nb::arg("scale"),
      nb::arg("weights"),
      "Attention's f16 row primitives of the `table` ('scalar' or 'best') on `rows` rows of n = len(q) "
      "binary16 values, `stride` apart: (dot_rows scores, the same from to_f32 + dot, axpy_rows sum of "
      "weights[r] * row r from zero, the same from to_f32 + axpy).");
}

}  // namespace

void init_testing(nb::module_& m) {
  nb::module_ testing = m.def_submodule("_testing", "Internals for muser's own tests and benchmarks.");
  bind_testing_kernels(testing);
  bind_testing_attention(testing);
  bind_testing_thread_pool(testing);
  bind_testing_cuda(testing);
  bind_testing_tokenizer(testing);
}

}  // namespace muser::bindings
