// Decode matvecs (1..4 rows) that also run the op after them in their
// epilogue (matvec_decode_kernel.cuh): the RoPE and KV store after q/k/v,
// the GLU and its quantization after gate/up, the residual add after the
// output and down projections (ops_matvec_fused_norm.cu: the same with the
// norm before them in their prologue). A decode step is a chain of
// short kernels whose boundaries (each kernel waits for its predecessor's
// grid to complete and its writes to be flushed) cost about as much as
// their work on small models; each fusion removes one boundary per layer.
//
// Only the types a real model's q/k/v and gate/up use most are instantiated
// (every instantiation is another ~40 kernels to compile); other types run
// the separate launches, with the same bits.
#include <string>

#include "backend/cuda/matvec_decode_kernel.cuh"
#include "core/error.h"

namespace muser::cuda {

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
  launch_fused<kEpilogueRopeKv, false>(type, qkv, 3, x, n_rows, rope_kv_epilogue(tail),
                                       static_cast<cudaStream_t>(stream), "matvec_rope_kv");
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
  launch_fused<kEpilogueGlu, false>(type, gate_up, 2, x, n_rows, glu_epilogue(kind, dst, view, counters),
                                    static_cast<cudaStream_t>(stream), "matvec_glu_quantized");
  return view;
}

bool matvec_residual_fits(DType type, size_t n_rows) {
  return fused_decode_type(type) && n_rows >= 1 && n_rows <= 4;
}

void matvec_residual(DType type, const MatvecTarget& target, const ActivationView& x, size_t n_rows, float* residual,
                     void* stream) {
  if (!matvec_residual_fits(type, n_rows) || target.ld_y != target.n_out) {
    throw InternalError("[cuda matvec_residual] needs a fused type, 1..4 rows and dense output rows");
  }
  DecodeEpilogue e;
  e.residual = residual;
  launch_fused<kEpilogueResidual, false>(type, &target, 1, x, n_rows, e, static_cast<cudaStream_t>(stream),
                                         "matvec_residual");
}

}  // namespace muser::cuda
