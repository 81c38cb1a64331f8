// `_core._testing.cuda_*`: single CUDA ops on NumPy inputs, for the GPU tests
// in tests/cuda/ and kernel benchmarks. In builds without CUDA (or without a
// device) every call raises ValueError saying why, so the signatures and the
// committed stubs are the same in every build. Results are new NumPy arrays
// that own their memory; compute releases the GIL.
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda_testing.h"
#include "bindings/bindings.h"
#include "bindings/host_arrays.h"
#include "core/error.h"
#include "tensor/dtype.h"

namespace nb = nanobind;

namespace muser::bindings {
namespace {


template <typename T>
nb::ndarray<nb::numpy, T> to_numpy(std::vector<T>&& v, std::initializer_list<size_t> shape) {
  auto* owned = new std::vector<T>(std::move(v));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::ndarray<nb::numpy, T>(owned->data(), shape.size(), shape.begin(), owner);
}

DType dtype_of(uint32_t type_id) {
  const DTypeInfo* info = find_dtype(type_id);
  if (info == nullptr) throw InvalidArgument("[testing] unsupported type id " + std::to_string(type_id));
  return info->type;
}

ActivationFormat format_of(const std::string& name) {
  for (ActivationFormat f : {ActivationFormat::Q8_0, ActivationFormat::Q8_1, ActivationFormat::Q8_K}) {
    if (name == activation_format_name(f)) return f;
  }
  throw InvalidArgument("[testing] activation format must be Q8_0, Q8_1 or Q8_K, got '" + name + "'");
}

void check_weight_bytes(DType type, size_t k, size_t rows, size_t got) {
  const DTypeInfo& info = dtype_info(type);
  if (k == 0 || k % info.block_elems != 0 || got != rows * (k / info.block_elems) * info.block_bytes) {
    throw InvalidArgument("[testing] weight bytes do not hold " + std::to_string(rows) + " rows of " +
                          std::to_string(k) + " " + info.name + " elements");
  }
}

// The case of cuda_attention / cuda_time_attention, shapes checked.
cuda_testing::AttentionCase attention_case(const U16s2D& k_plane, const U16s2D& v_plane, const Floats2D& q,
                                           std::vector<int32_t> positions, size_t n_head, size_t n_head_kv,
                                           size_t ring_rows, size_t window, float scale) {
  cuda_testing::AttentionCase c;
  c.plane_rows = k_plane.shape(0);
  if (v_plane.shape(0) != c.plane_rows || n_head == 0 || n_head_kv == 0 || k_plane.shape(1) % n_head_kv != 0 ||
      v_plane.shape(1) % n_head_kv != 0 || q.shape(1) % n_head != 0) {
    throw InvalidArgument("[testing] attention: inconsistent shapes");
  }
  c.head_dim_k = k_plane.shape(1) / n_head_kv;
  c.head_dim_v = v_plane.shape(1) / n_head_kv;
  c.k_plane.assign(k_plane.data(), k_plane.data() + k_plane.size());
  c.v_plane.assign(v_plane.data(), v_plane.data() + v_plane.size());
  c.q.assign(q.data(), q.data() + q.size());
  c.positions = std::move(positions);
  c.ring_rows = ring_rows;
  c.n_head = n_head;
  c.n_head_kv = n_head_kv;
  c.window = window;
  c.scale = scale;
  if (q.shape(0) != c.positions.size()) throw InvalidArgument("[testing] attention: one position per query row");
  return c;
}

// The attention kernel named by a test or benchmark ("auto", "decode" or
// "prefill"), with the prefill kernel's warps per block (0: its default).
void choose_attention_kernel(cuda_testing::AttentionCase& c, const std::string& kernel, int prefill_warps) {
  using Kernel = cuda_testing::AttentionCase::Kernel;
  if (kernel == "auto") {
    c.kernel = Kernel::Auto;
  } else if (kernel == "decode") {
    c.kernel = Kernel::Decode;
  } else if (kernel == "prefill") {
    c.kernel = Kernel::Prefill;
  } else {
    throw InvalidArgument("[testing] attention kernel must be auto, decode or prefill, got '" + kernel + "'");
  }
  if (prefill_warps < 0 || prefill_warps > 16) {
    throw InvalidArgument("[testing] attention prefill_warps must be 0..16, got " + std::to_string(prefill_warps));
  }
  c.prefill_warps = prefill_warps;
}

}  // namespace

void bind_testing_cuda(nb::module_& m) {
  m.def("cuda_free_bytes", &cuda_testing::device_free_bytes, "Device memory free right now, in bytes.");
  m.def("cuda_shared_memory_per_block_optin", &cuda_testing::shared_memory_per_block_optin,
        "The shared memory a block may opt in to on this device, in bytes.");
  m.def(
      "cuda_gemm_packs", [](uint32_t type_id) { return cuda_testing::gemm_packs(dtype_of(type_id)); },
      nb::arg("type_id"), "Whether the prefill GEMM of this weight type takes its packed kernel on this device.");
  m.def("cuda_attention_uses_tensor_cores", &cuda_testing::attention_uses_tensor_cores, nb::arg("n_head"),
        nb::arg("n_head_kv"), nb::arg("head_dim_k"), nb::arg("head_dim_v"),
        "Whether attention of this head layout runs on the tensor cores rather than the scalar kernels.");
  nb::class_<cuda_testing::DeviceMemoryHold>(m, "CudaMemoryHold",
                                             "Holds device memory until release() (tests of out-of-memory paths).")
      .def(nb::init<size_t>(), nb::arg("bytes"))
      .def("release", &cuda_testing::DeviceMemoryHold::release, "Frees the held memory now.");
  m.def(
      "cuda_matvec",
      [](uint32_t type_id, const Bytes1D& w, size_t n_out, const Floats2D& x, int warp_rows, int unroll, bool wide,
         int lane_rows) {
        const DType type = dtype_of(type_id);
        const size_t n_rows = x.shape(0), k = x.shape(1);
        check_weight_bytes(type, k, n_out, w.shape(0));
        std::vector<float> y;
        {
          nb::gil_scoped_release release;
          y = cuda_testing::matvec(type, w.data(), n_out, k, x.data(), n_rows, warp_rows, unroll, wide, lane_rows);
        }
        return to_numpy(std::move(y), {n_rows, n_out});
      },
      nb::arg("type_id"), nb::arg("w"), nb::arg("n_out"), nb::arg("x"), nb::arg("warp_rows") = 0,
      nb::arg("unroll") = 0, nb::arg("wide") = true, nb::arg("lane_rows") = 1,
      "y = x @ W.T on the GPU for W (n_out, x.shape[1]) of `type_id` (raw GGUF bytes); all rows in one "
      "launch (the decode kernel for 1..4 rows, tiles of 8 for more). warp_rows 0: the decode config the "
      "backend picks; otherwise (1..4 rows) that config: warp_rows weight rows per warp, unroll units per "
      "lane in flight, wide 16-byte loads where the type has them, lane_rows weight rows spread across "
      "each warp's lanes (1 or 8).");
  m.def(
      "cuda_matvec_targets",
      [](uint32_t type_id, const std::vector<Bytes1D>& ws, const std::vector<size_t>& n_outs, const Floats2D& x) {
        const DType type = dtype_of(type_id);
        const size_t n_rows = x.shape(0), k = x.shape(1);
        if (ws.size() != n_outs.size()) throw InvalidArgument("[testing] cuda_matvec_targets: one n_out per matrix");
        std::vector<const uint8_t*> ptrs;
        for (size_t i = 0; i < ws.size(); ++i) {
          check_weight_bytes(type, k, n_outs[i], ws[i].shape(0));
          ptrs.push_back(ws[i].data());
        }
        std::vector<std::vector<float>> ys;
        {
          nb::gil_scoped_release release;
          ys = cuda_testing::matvec_targets(type, ptrs, n_outs, k, x.data(), n_rows);
        }
        nb::list out;
        for (size_t i = 0; i < ys.size(); ++i) out.append(to_numpy(std::move(ys[i]), {n_rows, n_outs[i]}));
        return out;
      },
      nb::arg("type_id"), nb::arg("ws"), nb::arg("n_outs"), nb::arg("x"),
      "[x @ W_i.T for each W_i] on the GPU through matvec_targets: 1..3 matrices of `type_id` (raw GGUF bytes, "
      "n_outs[i] rows each) reading the same x, one decode launch for 1..4 rows.");
  m.def(
      "cuda_matvec_mma",
      [](uint32_t type_id, const Bytes1D& w, size_t n_out, const Floats2D& x, int split, const std::string& weights) {
        const DType type = dtype_of(type_id);
        const size_t n_rows = x.shape(0), k = x.shape(1);
        check_weight_bytes(type, k, n_out, w.shape(0));
        std::vector<float> y;
        {
          nb::gil_scoped_release release;
          y = cuda_testing::matvec_mma(type, w.data(), n_out, k, x.data(), n_rows, split, weights);
        }
        return to_numpy(std::move(y), {n_rows, n_out});
      },
      nb::arg("type_id"), nb::arg("w"), nb::arg("n_out"), nb::arg("x"), nb::arg("split") = 0,
      nb::arg("weights") = "any",
      "y = x @ W.T for 1..4 rows through the tensor-core decode matvec (Q4_0) on W's GGUF blocks or its packed "
      "copy (weights: 'any' as the engine chooses (the packed copy unless MUSER_CUDA_DECODE_MMA_BLOCKS=1), "
      "'blocks', 'packed'), each 16-output tile's 32 classes cut into `split` subtrees (packed 1, 2, 4, 8; blocks "
      "4, 8; 0: the kernel's pick).");
  m.def(
      "cuda_time_matvec",
      [](uint32_t type_id, const Bytes1D& w, size_t n_out, const Floats2D& x, int reps, int warp_rows, int unroll,
         bool wide, int lane_rows) {
        const DType type = dtype_of(type_id);
        const size_t n_rows = x.shape(0), k = x.shape(1);
        check_weight_bytes(type, k, n_out, w.shape(0));
        nb::gil_scoped_release release;
        return cuda_testing::time_matvec(type, w.data(), n_out, k, x.data(), n_rows, warp_rows, unroll, wide, reps,
                                         lane_rows);
      },
      nb::arg("type_id"), nb::arg("w"), nb::arg("n_out"), nb::arg("x"), nb::arg("reps") = 50,
      nb::arg("warp_rows") = 0, nb::arg("unroll") = 0, nb::arg("wide") = true, nb::arg("lane_rows") = 1,
      "Mean seconds of one cuda_matvec launch (same config arguments), each reading W from device memory "
      "(launches cycle through copies of W).");
  m.def(
      "cuda_quantize",
      [](const std::string& format_name, const Floats2D& x) {
        const ActivationFormat format = format_of(format_name);
        const size_t n_rows = x.shape(0), k = x.shape(1);
        cuda_testing::QuantizedRows q;
        {
          nb::gil_scoped_release release;
          q = cuda_testing::quantize(format, x.data(), n_rows, k);
        }
        const size_t nd = q.d.size(), ns = q.s.size(), nbs = q.bsum.size();
        return nb::make_tuple(to_numpy(std::move(q.q), {n_rows, k}), to_numpy(std::move(q.d), {nd}),
                              to_numpy(std::move(q.s), {ns}), to_numpy(std::move(q.bsum), {nbs}));
      },
      nb::arg("format"), nb::arg("x"),
      "(q, d, s, bsum) of the GPU activation quantization of rows x (d per block; s Q8_1 only; bsum Q8_K only).");
  m.def(
      "cuda_get_rows",
      [](uint32_t type_id, const Bytes1D& w, size_t k, size_t n_rows_w, std::vector<int32_t> ids) {
        const DType type = dtype_of(type_id);
        check_weight_bytes(type, k, n_rows_w, w.shape(0));
        std::vector<float> out;
        {
          nb::gil_scoped_release release;
          out = cuda_testing::get_rows(type, w.data(), k, n_rows_w, ids);
        }
        return to_numpy(std::move(out), {ids.size(), k});
      },
      nb::arg("type_id"), nb::arg("w"), nb::arg("k"), nb::arg("n_rows_w"), nb::arg("ids"),
      "Rows `ids` of a (n_rows_w, k) tensor, dequantized on the GPU.");
  m.def(
      "cuda_rms_norm",
      [](const Floats2D& x, const Floats1D& weight, float eps) {
        const size_t n = x.shape(0), width = x.shape(1);
        if (weight.shape(0) != width) throw InvalidArgument("[testing] rms_norm weight length != row width");
        std::vector<float> out;
        {
          nb::gil_scoped_release release;
          out = cuda_testing::rms_norm(x.data(), weight.data(), n, width, eps);
        }
        return to_numpy(std::move(out), {n, width});
      },
      nb::arg("x"), nb::arg("weight"), nb::arg("eps"), "RMS norm of each row times weight, on the GPU.");
  m.def(
      "cuda_rms_norm_quantized",
      [](const std::string& format_name, const Floats2D& x, const Floats1D& weight, float eps) {
        const ActivationFormat format = format_of(format_name);
        const size_t n = x.shape(0), width = x.shape(1);
        if (weight.shape(0) != width) throw InvalidArgument("[testing] rms_norm weight length != row width");
        cuda_testing::NormQuantized r;
        {
          nb::gil_scoped_release release;
          r = cuda_testing::rms_norm_quantized(format, x.data(), weight.data(), n, width, eps);
        }
        const size_t nd = r.q.d.size(), ns = r.q.s.size();
        return nb::make_tuple(to_numpy(std::move(r.out), {n, width}), to_numpy(std::move(r.q.q), {n, width}),
                              to_numpy(std::move(r.q.d), {nd}), to_numpy(std::move(r.q.s), {ns}));
      },
      nb::arg("format"), nb::arg("x"), nb::arg("weight"), nb::arg("eps"),
      "(out, q, d, s) of the fused GPU rms_norm + Q8_0/Q8_1 quantization of rows x (s Q8_1 only).");
  m.def(
      "cuda_glu",
      [](const std::string& kind, const Floats1D& gate, const Floats1D& up) {
        if (kind != "silu" && kind != "gelu_tanh") throw InvalidArgument("[testing] glu kind: silu or gelu_tanh");
        if (gate.shape(0) != up.shape(0)) throw InvalidArgument("[testing] glu: gate and up lengths differ");
        std::vector<float> out;
        {
          nb::gil_scoped_release release;
          out = cuda_testing::glu(kind == "silu" ? 0 : 1, gate.data(), up.data(), gate.shape(0));
        }
        return to_numpy(std::move(out), {gate.shape(0)});
      },
      nb::arg("kind"), nb::arg("gate"), nb::arg("up"), "act(gate) * up on the GPU.");
  m.def(
      "cuda_add_rms_norm",
      [](const std::string& format_name, const Floats2D& a, const Floats2D& b, const Floats1D& weight, float eps) {
        const ActivationFormat format = format_name == "F32" ? ActivationFormat::F32 : format_of(format_name);
        const size_t n = a.shape(0), width = a.shape(1);
        if (b.shape(0) != n || b.shape(1) != width || weight.shape(0) != width) {
          throw InvalidArgument("[testing] add_rms_norm: a, b and weight shapes differ");
        }
        cuda_testing::AddNormed r;
        {
          nb::gil_scoped_release release;
          r = cuda_testing::add_rms_norm(format, a.data(), b.data(), weight.data(), n, width, eps);
        }
        const size_t nq = r.normed.q.q.size() / std::max<size_t>(n, 1), nd = r.normed.q.d.size(),
                     ns = r.normed.q.s.size();
        return nb::make_tuple(to_numpy(std::move(r.sum), {n, width}), to_numpy(std::move(r.normed.out), {n, width}),
                              to_numpy(std::move(r.normed.q.q), {n, nq}), to_numpy(std::move(r.normed.q.d), {nd}),
                              to_numpy(std::move(r.normed.q.s), {ns}));
      },
      nb::arg("format"), nb::arg("a"), nb::arg("b"), nb::arg("weight"), nb::arg("eps"),
      "(sum, out, q, d, s) of the fused GPU residual add + rms_norm (+ Q8_0/Q8_1 quantization; format 'F32': "
      "none, q/d/s empty), the sum written over a.");
  m.def(
      "cuda_glu_quantized",
      [](const std::string& format_name, const std::string& kind, const Floats2D& gate, const Floats2D& up) {
        const ActivationFormat format = format_of(format_name);
        if (kind != "silu" && kind != "gelu_tanh") throw InvalidArgument("[testing] glu kind: silu or gelu_tanh");
        const size_t n = gate.shape(0), width = gate.shape(1);
        if (up.shape(0) != n || up.shape(1) != width) throw InvalidArgument("[testing] glu: gate and up shapes differ");
        cuda_testing::NormQuantized r;
        {
          nb::gil_scoped_release release;
          r = cuda_testing::glu_quantized(format, kind == "silu" ? 0 : 1, gate.data(), up.data(), n, width);
        }
        const size_t nd = r.q.d.size(), ns = r.q.s.size();
        return nb::make_tuple(to_numpy(std::move(r.out), {n, width}), to_numpy(std::move(r.q.q), {n, width}),
                              to_numpy(std::move(r.q.d), {nd}), to_numpy(std::move(r.q.s), {ns}));
      },
      nb::arg("format"), nb::arg("kind"), nb::arg("gate"), nb::arg("up"),
      "(out, q, d, s) of the fused GPU glu + Q8_0/Q8_1 quantization of (rows, width) gate/up (s Q8_1 only).");
  m.def(
      "cuda_softcap",
      [](const Floats1D& x, float cap) {
        std::vector<float> out;
        {
          nb::gil_scoped_release release;
          out = cuda_testing::softcap(x.data(), x.shape(0), cap);
        }
        return to_numpy(std::move(out), {x.shape(0)});
      },
      nb::arg("x"), nb::arg("cap"), "cap * tanh(x / cap) on the GPU.");
  m.def(
      "cuda_rope",
      [](const Floats2D& x, size_t n_heads, size_t n_rot, bool neox, std::vector<int32_t> positions, double base,
         double position_scale, std::vector<float> divisors) {
        const size_t n_rows = x.shape(0);
        if (n_heads == 0 || x.shape(1) % n_heads != 0) throw InvalidArgument("[testing] rope: width % n_heads");
        const size_t head_dim = x.shape(1) / n_heads;
        std::vector<float> out;
        {
          nb::gil_scoped_release release;
          out = cuda_testing::rope(x.data(), n_rows, n_heads, head_dim, n_rot, neox, positions, base, position_scale,
                                   divisors);
        }
        return to_numpy(std::move(out), {n_rows, x.shape(1)});
      },
      nb::arg("x"), nb::arg("n_heads"), nb::arg("n_rot"), nb::arg("neox"), nb::arg("positions"), nb::arg("base"),
      nb::arg("position_scale") = 1.0, nb::arg("divisors") = std::vector<float>{},
      "RoPE of each row's heads at `positions` on the GPU.");
  m.def(
      "cuda_rope_pair",
      [](const Floats2D& a, size_t n_heads_a, const Floats2D& b, size_t n_heads_b, size_t n_rot, bool neox,
         std::vector<int32_t> positions, double base) {
        const size_t n_rows = a.shape(0);
        if (n_heads_a == 0 || n_heads_b == 0 || b.shape(0) != n_rows || a.shape(1) % n_heads_a != 0 ||
            b.shape(1) % n_heads_b != 0 || a.shape(1) / n_heads_a != b.shape(1) / n_heads_b) {
          throw InvalidArgument("[testing] rope_pair: rows and head sizes of a and b must agree");
        }
        const size_t head_dim = a.shape(1) / n_heads_a;
        std::vector<float> out;
        {
          nb::gil_scoped_release release;
          out = cuda_testing::rope_pair(a.data(), n_heads_a, b.data(), n_heads_b, n_rows, head_dim, n_rot, neox,
                                        positions, base);
        }
        std::vector<float> rb(out.begin() + static_cast<std::ptrdiff_t>(n_rows * a.shape(1)), out.end());
        out.resize(n_rows * a.shape(1));
        return nb::make_tuple(to_numpy(std::move(out), {n_rows, a.shape(1)}),
                              to_numpy(std::move(rb), {n_rows, b.shape(1)}));
      },
      nb::arg("a"), nb::arg("n_heads_a"), nb::arg("b"), nb::arg("n_heads_b"), nb::arg("n_rot"), nb::arg("neox"),
      nb::arg("positions"), nb::arg("base"),
      "(a, b) rotated at `positions` in one launch (the backend's q/k rope), on the GPU.");
  m.def(
      "cuda_rope_pair_kv",
      [](const Floats2D& a, size_t n_heads_a, const Floats2D& b, size_t n_heads_b, const Floats2D& v, size_t n_rot,
         bool neox, std::vector<int32_t> positions, double base, size_t plane_rows, size_t ring_rows,
         std::vector<int32_t> writes, bool fused) {
        const size_t n_rows = a.shape(0);
        if (n_heads_a == 0 || n_heads_b == 0 || b.shape(0) != n_rows || v.shape(0) != n_rows ||
            a.shape(1) % n_heads_a != 0 || b.shape(1) % n_heads_b != 0 ||
            a.shape(1) / n_heads_a != b.shape(1) / n_heads_b) {
          throw InvalidArgument("[testing] rope_pair_kv: rows and head sizes of a, b and v must agree");
        }
        const size_t head_dim = a.shape(1) / n_heads_a, v_width = v.shape(1);
        cuda_testing::RopeKvResult r;
        {
          nb::gil_scoped_release release;
          r = cuda_testing::rope_pair_kv(a.data(), n_heads_a, b.data(), n_heads_b, v.data(), v_width, n_rows,
                                         head_dim, n_rot, neox, positions, base, plane_rows, ring_rows, writes, fused);
        }
        return nb::make_tuple(to_numpy(std::move(r.a), {n_rows, a.shape(1)}),
                              to_numpy(std::move(r.b), {n_rows, b.shape(1)}),
                              to_numpy(std::move(r.k_plane), {plane_rows, b.shape(1)}),
                              to_numpy(std::move(r.v_plane), {plane_rows, v_width}));
      },
      nb::arg("a"), nb::arg("n_heads_a"), nb::arg("b"), nb::arg("n_heads_b"), nb::arg("v"), nb::arg("n_rot"),
      nb::arg("neox"), nb::arg("positions"), nb::arg("base"), nb::arg("plane_rows"), nb::arg("ring_rows"),
      nb::arg("writes"), nb::arg("fused"),
      "A layer's q/k rope and KV store on the GPU: (a, b, k_plane, v_plane) after rotating a and b at `positions` "
      "and storing b and v as f16 into layer 1 of two-layer planes (rows start 0xffff); fused: one launch "
      "(rope_pair_kv), else rope_pair then write_kv.");
  m.def(
      "cuda_attention",
      [](const U16s2D& k_plane, const U16s2D& v_plane, const Floats2D& q, std::vector<int32_t> positions,
         size_t n_head, size_t n_head_kv, size_t ring_rows, size_t window, float scale, const std::string& kernel,
         int prefill_warps, size_t plane_copies) {
        cuda_testing::AttentionCase c =
            attention_case(k_plane, v_plane, q, std::move(positions), n_head, n_head_kv, ring_rows, window, scale);
        choose_attention_kernel(c, kernel, prefill_warps);
        c.plane_copies = plane_copies;
        std::vector<float> out;
        {
          nb::gil_scoped_release release;
          out = cuda_testing::attention(c);
        }
        return to_numpy(std::move(out), {c.positions.size(), n_head * c.head_dim_v});
      },
      nb::arg("k_plane"), nb::arg("v_plane"), nb::arg("q"), nb::arg("positions"), nb::arg("n_head"),
      nb::arg("n_head_kv"), nb::arg("ring_rows") = 0, nb::arg("window") = 0, nb::arg("scale") = 1.0f,
      nb::arg("kernel") = "auto", nb::arg("prefill_warps") = 0, nb::arg("plane_copies") = 1,
      "Attention of query rows at `positions` over one layer's f16 K/V planes (raw bits), on the GPU; kernel: "
      "auto (the backend's choice for this row count), decode or prefill (prefill_warps warps per block, 0: its "
      "default); row r reads copy r % plane_copies (1..8) of the planes (rows of several sessions).");
  m.def(
      "cuda_attention_on_shared_scratch",
      [](const U16s2D& k_plane, const U16s2D& v_plane, const Floats2D& q, std::vector<int32_t> positions,
         size_t n_head, size_t n_head_kv, std::vector<size_t> later_row_counts) {
        const cuda_testing::AttentionCase c =
            attention_case(k_plane, v_plane, q, std::move(positions), n_head, n_head_kv, 0, 0, 1.0f);
        nb::gil_scoped_release release;
        cuda_testing::attention_on_shared_scratch(c, later_row_counts);
      },
      nb::arg("k_plane"), nb::arg("v_plane"), nb::arg("q"), nb::arg("positions"), nb::arg("n_head"),
      nb::arg("n_head_kv"), nb::arg("later_row_counts"),
      "Attention over all rows, then over the first n rows for each later count, on one scratch; raises unless "
      "each row keeps its bits.");
  m.def(
      "cuda_attention_quantized",
      [](const std::string& format_name, const U16s2D& k_plane, const U16s2D& v_plane, const Floats2D& q,
         std::vector<int32_t> positions, size_t n_head, size_t n_head_kv, size_t ring_rows, size_t window,
         float scale, const std::string& kernel) {
        const ActivationFormat format = format_of(format_name);
        cuda_testing::AttentionCase c =
            attention_case(k_plane, v_plane, q, std::move(positions), n_head, n_head_kv, ring_rows, window, scale);
        choose_attention_kernel(c, kernel, 0);
        cuda_testing::NormQuantized r;
        {
          nb::gil_scoped_release release;
          r = cuda_testing::attention_quantized(c, format);
        }
        const size_t n = c.positions.size(), width = n_head * c.head_dim_v;
        const size_t nd = r.q.d.size(), ns = r.q.s.size();
        return nb::make_tuple(to_numpy(std::move(r.out), {n, width}), to_numpy(std::move(r.q.q), {n, width}),
                              to_numpy(std::move(r.q.d), {nd}), to_numpy(std::move(r.q.s), {ns}));
      },
      nb::arg("format"), nb::arg("k_plane"), nb::arg("v_plane"), nb::arg("q"), nb::arg("positions"),
      nb::arg("n_head"), nb::arg("n_head_kv"), nb::arg("ring_rows") = 0, nb::arg("window") = 0,
      nb::arg("scale") = 1.0f, nb::arg("kernel") = "auto",
      "(out, q, d, s): the attention and its output quantized (Q8_0/Q8_1) in the same launch, on the GPU; kernel "
      "as for cuda_attention.");
  m.def(
      "cuda_time_attention",
      [](const U16s2D& k_plane, const U16s2D& v_plane, const Floats2D& q, std::vector<int32_t> positions,
         size_t n_head, size_t n_head_kv, int reps, const std::string& kernel, int prefill_warps) {
        cuda_testing::AttentionCase c =
            attention_case(k_plane, v_plane, q, std::move(positions), n_head, n_head_kv, 0, 0, 1.0f);
        choose_attention_kernel(c, kernel, prefill_warps);
        nb::gil_scoped_release release;
        return cuda_testing::attention_time_us(c, reps);
      },
      nb::arg("k_plane"), nb::arg("v_plane"), nb::arg("q"), nb::arg("positions"), nb::arg("n_head"),
      nb::arg("n_head_kv"), nb::arg("reps") = 20, nb::arg("kernel") = "auto", nb::arg("prefill_warps") = 0,
      "Mean microseconds of one attention call (global layout; its launches, 64 rows each) with the KV evicted "
      "from L2 before each; kernel as for cuda_attention.");
  m.def(
      "cuda_matvec_groups",
      [](uint32_t type_id, const Bytes1D& w, size_t n_out, const Floats2D& x, size_t group_rows) {
        const DType type = dtype_of(type_id);
        const size_t n_rows = x.shape(0), k = x.shape(1);
        check_weight_bytes(type, k, n_out, w.shape(0));
        std::vector<float> y;
        {
          nb::gil_scoped_release release;
          y = cuda_testing::matvec_groups(type, w.data(), n_out, k, x.data(), n_rows, group_rows);
        }
        return to_numpy(std::move(y), {n_rows, n_out});
      },
      nb::arg("type_id"), nb::arg("w"), nb::arg("n_out"), nb::arg("x"), nb::arg("group_rows"),
      "cuda_matvec with the rows sent as consecutive groups of group_rows (1..4) rows, one matvec call "
      "(a decode group) each.");
  m.def(
      "cuda_gemm_mma",
      [](uint32_t type_id, const Bytes1D& w, size_t n_out, const Floats2D& x, bool packed) {
        const DType type = dtype_of(type_id);
        const size_t n_rows = x.shape(0), k = x.shape(1);
        check_weight_bytes(type, k, n_out, w.shape(0));
        std::vector<float> y;
        {
          nb::gil_scoped_release release;
          y = cuda_testing::gemm_mma(type, w.data(), n_out, k, x.data(), n_rows, packed);
        }
        return to_numpy(std::move(y), {n_rows, n_out});
      },
      nb::arg("type_id"), nb::arg("w"), nb::arg("n_out"), nb::arg("x"), nb::arg("packed") = true,
      "cuda_matvec through the int8 tensor-core GEMM itself, at any row count (Q4_0, Q4_1, Q5_0, Q5_1, "
      "Q8_0, Q4_K; other types, and matrices not starting and ending 4-byte aligned, raise ValueError): "
      "on the packed copy where the type has one (cuda_gemm_packs), with packed=False on the GGUF "
      "blocks (the first version).");
  m.def(
      "cuda_matvec_time_us",
      [](uint32_t type_id, const Bytes1D& w, size_t n_out, const Floats2D& x, size_t group_rows, int reps) {
        const DType type = dtype_of(type_id);
        const size_t n_rows = x.shape(0), k = x.shape(1);
        check_weight_bytes(type, k, n_out, w.shape(0));
        nb::gil_scoped_release release;
        return cuda_testing::matvec_time_us(type, w.data(), n_out, k, x.data(), n_rows, group_rows, reps);
      },
      nb::arg("type_id"), nb::arg("w"), nb::arg("n_out"), nb::arg("x"), nb::arg("group_rows") = 0,
      nb::arg("reps") = 20,
      "Mean microseconds of cuda_matvec's one call (group_rows 0: the tensor-core GEMM from 41 rows on for its "
      "types) or of cuda_matvec_groups, over `reps` back-to-back runs, activations already quantized.");
}

}  // namespace muser::bindings
