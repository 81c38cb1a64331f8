// Decode matvecs (1..4 rows) that also run the op after them in their
// epilogue (matvec_decode_kernel.cuh): the RoPE and KV store after q/k/v,
// the GLU and its quantization after gate/up. A decode step is a chain of
// short kernels whose boundaries (each kernel waits for its predecessor's
// grid to complete and its writes to be flushed) were thought to cost about
// as much as their work on small models; each fusion removes one boundary
// per layer. Measured on the H200 (smollm2-135m Q4_0, 60 launches fewer per
// step) it gains only 1.5-3% at 1 row and 1-2% at 4: under programmatic
// dependent launch a boundary costs ~0.5 us, and the work moved into the
// epilogues (the RoPE's double cos/sin, the GLU's counters and tail) is
// still on the step's critical path. On llama3-8b Q4_0 both gained 6% at 2
// and 4 rows and lost 7% at one (session 9); the GLU's alone then measured
// 3-4% slower than its separate launch at 2 and 4 rows (session 10), so the
// backend takes the RoPE + KV one for decode groups of 2..4 rows
// (cuda_backend.h says how MUSER_CUDA_FUSE changes that).
//
// Only the types a real model's q/k/v and gate/up use most are instantiated
// (every instantiation is another ~40 kernels to compile); other types run
// the separate launches, with the same bits.
#include <string>

#include "backend/cuda/matvec_decode_kernel.cuh"
#include "core/error.h"

namespace muser::cuda {
namespace {

template <typename F>
bool dispatch_fused_type(DType type, F&& f) {
  switch (type) {
    case DType::Q4_0: f.template operator()<TypeQ4_0>(); return true;
    case DType::Q8_0: f.template operator()<TypeQ8_0>(); return true;
    case DType::Q4_K: f.template operator()<TypeQ4_K>(); return true;
    default: return false;
  }
}

template <int kEpilogue>
void launch_fused(DType type, const MatvecTarget* targets, size_t count, const ActivationView& x, size_t n_rows,
                  const DecodeEpilogue& epilogue, cudaStream_t stream, const char* what) {
  size_t n_out = 0;
  for (size_t i = 0; i < count; ++i) n_out += targets[i].n_out;
  const DecodeConfig config = decode_config(type, n_out, n_rows, false);
  bool ok = false;
  const bool typed = dispatch_fused_type(type, [&]<typename T>() {
    if (x.format != T::kFormat) return;
    switch (n_rows) {
      case 1: ok = launch_config<T, 1, kEpilogue>(config, targets, count, x, stream, epilogue); break;
      case 2: ok = launch_config<T, 2, kEpilogue>(config, targets, count, x, stream, epilogue); break;
      case 3: ok = launch_config<T, 3, kEpilogue>(config, targets, count, x, stream, epilogue); break;
      default: ok = launch_config<T, 4, kEpilogue>(config, targets, count, x, stream, epilogue); break;
    }
  });
  if (!typed || !ok) {
    throw InternalError(std::string("[cuda ") + what + "] no fused kernel for type " + dtype_info(type).name +
                        " with " + activation_format_name(x.format) + " activations");
  }
}

}  // namespace

bool fused_decode_type(DType type) { return type == DType::Q4_0 || type == DType::Q8_0 || type == DType::Q4_K; }

bool matvec_rope_kv_fits(DType type, size_t q_out, size_t k_out, size_t head_dim, size_t n_rot, bool neox,
                         size_t n_rows) {
  return fused_decode_type(type) && !neox && n_rows >= 1 && n_rows <= 4 && head_dim > 0 && head_dim % 2 == 0 &&
         n_rot > 0 && n_rot % 2 == 0 && n_rot <= head_dim && q_out % head_dim == 0 && k_out % head_dim == 0;
}

void matvec_rope_kv(DType type, const MatvecTarget* qkv, const ActivationView& x, size_t n_rows,
                    const RopeKvTail& tail, void* stream) {
  if (!matvec_rope_kv_fits(type, qkv[0].n_out, qkv[1].n_out, tail.head_dim, tail.n_rot, false, n_rows) ||
      tail.kv.tables == nullptr) {
    throw InternalError("[cuda matvec_rope_kv] needs a fused type, 1..4 rows, whole heads, an even n_rot and a KV table");
  }
  const size_t weights = (qkv[0].n_out + qkv[1].n_out + qkv[2].n_out) * x.k;
  if (decode_takes_mma(type, n_rows, weights, true) && matvec_rope_kv_mma(type, qkv, x, n_rows, tail, stream)) return;
  launch_fused<kEpilogueRopeKv>(type, qkv, 3, x, n_rows, rope_kv_epilogue(tail), static_cast<cudaStream_t>(stream),
                                "matvec_rope_kv");
}

size_t glu_counter_count(size_t width) { return width / 32; }

bool matvec_glu_fits(DType type, size_t gate_out, size_t up_out, ActivationFormat format, size_t n_rows) {
  return fused_decode_type(type) && n_rows >= 1 && n_rows <= 4 && gate_out == up_out && gate_out % 32 == 0 &&
         gate_out > 0 && (format == ActivationFormat::Q8_0 || format == ActivationFormat::Q8_1);
}

ActivationView matvec_glu_quantized(DType type, const MatvecTarget* gate_up, const ActivationView& x, size_t n_rows,
                                    Glu kind, float* dst, ActivationFormat format, void* scratch, unsigned* counters,
                                    void* stream) {
  const size_t width = gate_up[0].n_out;
  if (!matvec_glu_fits(type, width, gate_up[1].n_out, format, n_rows) || counters == nullptr) {
    throw InternalError("[cuda matvec_glu_quantized] needs a fused type, 1..4 rows, gate and up of one width "
                        "(a multiple of 32), Q8_0 / Q8_1 output and counters");
  }
  const ActivationView view = activation_view(format, n_rows, width, scratch);
  DecodeEpilogue e;
  e.glu_kind = static_cast<int>(kind);
  e.glu_out = dst;
  e.counters = counters;
  e.q = const_cast<int8_t*>(view.q);
  e.d = const_cast<float*>(view.d);
  e.s = format == ActivationFormat::Q8_1 ? const_cast<float*>(view.s) : nullptr;
  launch_fused<kEpilogueGlu>(type, gate_up, 2, x, n_rows, e, static_cast<cudaStream_t>(stream),
                             "matvec_glu_quantized");
  return view;
}

}  // namespace muser::cuda
