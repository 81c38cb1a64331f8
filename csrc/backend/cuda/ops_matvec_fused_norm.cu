// Fused decode matvecs (ops_matvec_fused.cu) whose input is the rms_norm of
// rows no wider than kNormInMaxWidth, computed by every block of the launch
// itself (the norm prologue of matvec_decode_kernel.cuh) instead of by a
// norm launch before it. Each block repeats the norm of its 1..4 rows (a
// few hundred floats each, from L2), which costs less than a launch
// boundary on the small models these widths belong to; launches of many
// blocks (an output projection) keep the separate norm. A file of its own
// so it compiles beside the other matvec files.
#include <string>

#include "backend/cuda/matvec_decode_kernel.cuh"
#include "core/error.h"

namespace muser::cuda {
namespace {

// Blocks of weight rows a norm prologue may be repeated in (all targets'
// rows together): beyond this the repeated norms' L2 reads outweigh the
// launch they save.
constexpr size_t kNormInMaxRows = 8192;

// The view the kernel is handed (its activations come from the prologue).
ActivationView norm_in_view(size_t k) {
  ActivationView x;
  x.format = ActivationFormat::Q8_0;
  x.k = k;
  return x;
}

void set_norm(DecodeEpilogue& e, const NormIn& norm, size_t k) {
  e.norm_x = norm.x;
  e.norm_w = norm.weight;
  e.norm_eps = norm.eps;
  e.norm_out = norm.out;
  // rms_norm's block for rows of k (norm_threads in ops_elementwise.cu).
  e.norm_threads = static_cast<unsigned>(32 * ((k + 32 * kNormInPerThread - 1) / (32 * kNormInPerThread)));
}

void check_fits(DType type, const MatvecTarget* targets, size_t count, const NormIn& norm, size_t k, size_t n_rows,
                const char* what) {
  size_t n_out = 0;
  for (size_t i = 0; i < count; ++i) n_out += targets[i].n_out;
  if (!matvec_norm_in_fits(type, k, n_out, n_rows) || norm.x == nullptr || norm.out == nullptr) {
    throw InternalError(std::string("[cuda ") + what + "] the norm prologue needs Q4_0 or Q8_0 weights, rows of " +
                        "at most " + std::to_string(kNormInMaxWidth) + " (a multiple of 32), 1..4 rows and " +
                        "at most " + std::to_string(kNormInMaxRows) + " weight rows");
  }
}

}  // namespace

bool matvec_norm_in_fits(DType type, size_t k, size_t n_out_total, size_t n_rows) {
  return (type == DType::Q4_0 || type == DType::Q8_0) && k > 0 && k % 32 == 0 && k <= kNormInMaxWidth &&
         n_rows >= 1 && n_rows <= 4 && n_out_total <= kNormInMaxRows;
}

void matvec_norm_in(DType type, const MatvecTarget* targets, size_t count, const NormIn& norm, size_t k,
                    size_t n_rows, void* stream) {
  check_fits(type, targets, count, norm, k, n_rows, "matvec_norm_in");
  DecodeEpilogue e;
  set_norm(e, norm, k);
  launch_fused<kEpilogueNone, true>(type, targets, count, norm_in_view(k), n_rows, e,
                                    static_cast<cudaStream_t>(stream), "matvec_norm_in");
}

void matvec_rope_kv_norm_in(DType type, const MatvecTarget* qkv, const NormIn& norm, size_t k, size_t n_rows,
                            const RopeKvTail& tail, void* stream) {
  check_fits(type, qkv, 3, norm, k, n_rows, "matvec_rope_kv_norm_in");
  if (!matvec_rope_kv_fits(type, qkv[0].n_out, qkv[1].n_out, tail.head_dim, tail.n_rot, false, n_rows) ||
      tail.kv.tables == nullptr) {
    throw InternalError("[cuda matvec_rope_kv_norm_in] needs whole heads, an even n_rot and a KV table");
  }
  DecodeEpilogue e = rope_kv_epilogue(tail);
  set_norm(e, norm, k);
  launch_fused<kEpilogueRopeKv, true>(type, qkv, 3, norm_in_view(k), n_rows, e, static_cast<cudaStream_t>(stream),
                                      "matvec_rope_kv_norm_in");
}

ActivationView matvec_glu_quantized_norm_in(DType type, const MatvecTarget* gate_up, const NormIn& norm, size_t k,
                                            size_t n_rows, Glu kind, float* dst, ActivationFormat format,
                                            void* scratch, unsigned* counters, void* stream) {
  check_fits(type, gate_up, 2, norm, k, n_rows, "matvec_glu_quantized_norm_in");
  const size_t width = gate_up[0].n_out;
  if (!matvec_glu_fits(type, width, gate_up[1].n_out, format, n_rows) || counters == nullptr) {
    throw InternalError("[cuda matvec_glu_quantized_norm_in] needs gate and up of one width (a multiple of 32), "
                        "Q8_0 / Q8_1 output and counters");
  }
  const ActivationView view = activation_view(format, n_rows, width, scratch);
  DecodeEpilogue e = glu_epilogue(kind, dst, view, counters);
  set_norm(e, norm, k);
  launch_fused<kEpilogueGlu, true>(type, gate_up, 2, norm_in_view(k), n_rows, e, static_cast<cudaStream_t>(stream),
                                   "matvec_glu_quantized_norm_in");
  return view;
}

}  // namespace muser::cuda
