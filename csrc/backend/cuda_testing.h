// Entry points that run single CUDA ops on host data, for the GPU tests
// (tests/cuda/) and kernel benchmarks: each copies its inputs to the device,
// runs the op on a private stream, waits and copies the result back. Built
// from csrc/backend/cuda/cuda_testing.cpp with CUDA, and from no_cuda.cpp
// (every call throws "compiled without CUDA") without. Not thread-safe
// against a running CudaBackend on the same device only in timing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tensor/dtype.h"
#include "tensor/reference_kernels.h"

namespace muser::cuda_testing {

// y (n_rows, n_out) = x (n_rows, k) @ W.T for W (n_out rows of k elements of
// `type`, raw GGUF bytes); x is quantized on the device first. All rows go
// through one launch (tiles as the backend uses them). warp_rows 0: the
// kernel config matvec picks; otherwise (1..4 rows only) the decode kernel
// with that config (cuda::DecodeConfig: warp_rows, unroll, wide, lane_rows).
std::vector<float> matvec(DType type, const uint8_t* w, size_t n_out, size_t k, const float* x, size_t n_rows,
                          int warp_rows, int unroll, bool wide, int lane_rows = 1);

// cuda::matvec_targets: W_i (n_outs[i] rows of k) times the same x, 1..3
// matrices (one launch for 1..4 rows); y_i (n_rows, n_outs[i]) each.
std::vector<std::vector<float>> matvec_targets(DType type, const std::vector<const uint8_t*>& ws,
                                               const std::vector<size_t>& n_outs, size_t k, const float* x,
                                               size_t n_rows);

// cuda::matvec_decode_mma for 1..4 rows, on W's GGUF blocks or its packed
// copy (made as the backend makes it at upload) as `weights` says ("any",
// "blocks", "packed"): y (n_rows, n_out), with the 16-output tiles' classes
// cut into `split` subtrees (0: the kernel's pick). Throws where the kernel
// does not take the call (a type other than Q4_0, rows the blocks kernel
// cannot read).
std::vector<float> matvec_mma(DType type, const uint8_t* w, size_t n_out, size_t k, const float* x, size_t n_rows,
                              int split, const std::string& weights);

// Seconds one matvec launch takes (config as matvec above; the activations
// quantized once before), the mean over `reps` launches after a warm-up,
// timed with CUDA events on the call's stream. Launches cycle through
// enough copies of W (256 MiB in all) that each reads its weights from
// device memory, not from the L2 cache. For the kernel benchmark.
double time_matvec(DType type, const uint8_t* w, size_t n_out, size_t k, const float* x, size_t n_rows,
                   int warp_rows, int unroll, bool wide, int reps, int lane_rows = 1);

// The device activation layout of quantize_activations, per row.
struct QuantizedRows {
  std::vector<int8_t> q;       // (n_rows, k)
  std::vector<float> d;        // (n_rows, k / block)
  std::vector<float> s;        // Q8_1: (n_rows, k / 32)
  std::vector<int32_t> bsum;   // Q8_K: (n_rows, k / 16)
};
QuantizedRows quantize(ActivationFormat format, const float* x, size_t n_rows, size_t k);

std::vector<float> get_rows(DType type, const uint8_t* w, size_t k, size_t n_rows_w, const std::vector<int32_t>& ids);
std::vector<float> rms_norm(const float* x, const float* weight, size_t n, size_t width, float eps);
// The fused rms_norm + Q8_0 / Q8_1 quantization of the backend's decode path:
// the normalized rows in `out` and their quantization in `q` (also what
// glu_quantized returns).
struct NormQuantized {
  std::vector<float> out;  // (n, width)
  QuantizedRows q;
};
NormQuantized rms_norm_quantized(ActivationFormat format, const float* x, const float* weight, size_t n, size_t width,
                                 float eps);
// kind 0: SwiGLU, 1: GeGLU (tanh). Returns act(gate) * up.
std::vector<float> glu(int kind, const float* gate, const float* up, size_t count);
// The residual add + rms_norm (+ Q8_0 / Q8_1 quantization; F32: none) of the
// backend's decode path, with the sum written over a as the backend does:
// `sum` = a + b, then what rms_norm_quantized returns for it.
struct AddNormed {
  std::vector<float> sum;  // (n, width)
  NormQuantized normed;
};
AddNormed add_rms_norm(ActivationFormat format, const float* a, const float* b, const float* weight, size_t n,
                       size_t width, float eps);
// The fused glu + Q8_0 / Q8_1 quantization of the backend's decode path, on
// (n_rows, width) gate and up rows.
NormQuantized glu_quantized(ActivationFormat format, int kind, const float* gate, const float* up, size_t n_rows,
                            size_t width);
std::vector<float> softcap(const float* x, size_t count, float cap);
// x (n_rows, n_heads * head_dim) rotated at `positions` with inv_freq
// pow(base, -2i/n_rot) / divisors[i] (divisors may be empty).
std::vector<float> rope(const float* x, size_t n_rows, size_t n_heads, size_t head_dim, size_t n_rot, bool neox,
                        const std::vector<int32_t>& positions, double base, double position_scale,
                        const std::vector<float>& divisors);

// The backend's q/k rope in one launch: a (n_rows, n_heads_a * head_dim) and
// b (n_rows, n_heads_b * head_dim) rotated at `positions` (base, scale 1).
std::vector<float> rope_pair(const float* a, size_t n_heads_a, const float* b, size_t n_heads_b, size_t n_rows,
                             size_t head_dim, size_t n_rot, bool neox, const std::vector<int32_t>& positions,
                             double base);

// A layer's rope pair and KV store: q (a) and k (b) rotated at `positions`,
// then the rotated k and v (n_rows, v_width) stored as f16 into layer 1 of
// two-layer planes of plane_rows rows (every plane row starting as 0xffff;
// ring_rows > 0 stores position p at row p % ring_rows; rows with
// writes[r] == 0 store nothing). fused: rope_pair_kv's one launch, else
// rope_pair then write_kv.
struct RopeKvResult {
  std::vector<float> a, b;
  std::vector<uint16_t> k_plane, v_plane;  // layer 1's, (plane_rows, width)
};
RopeKvResult rope_pair_kv(const float* a, size_t n_heads_a, const float* b, size_t n_heads_b, const float* v,
                          size_t v_width, size_t n_rows, size_t head_dim, size_t n_rot, bool neox,
                          const std::vector<int32_t>& positions, double base, size_t plane_rows, size_t ring_rows,
                          const std::vector<int32_t>& writes, bool fused);

// One layer of f16 K/V planes of `plane_rows` rows and queries at given
// positions; ring_rows > 0 reads position p at row p % ring_rows.
struct AttentionCase {
  std::vector<uint16_t> k_plane, v_plane;  // (plane_rows, n_head_kv * head_dim_*), f16 bits
  size_t plane_rows = 0;
  std::vector<float> q;                    // (n_rows, n_head * head_dim_k)
  std::vector<int32_t> positions;          // (n_rows)
  size_t ring_rows = 0;
  size_t n_head = 0, n_head_kv = 0, head_dim_k = 0, head_dim_v = 0, window = 0;
  float scale = 1.0f;
  // Which kernel (cuda::AttentionKernel): what the backend picks for this
  // row count, the decode kernel or the prefill kernel; and the prefill
  // kernel's warps per block (0: its default).
  enum class Kernel { Auto, Decode, Prefill } kernel = Kernel::Auto;
  int prefill_warps = 0;
  // Row r reads copy r % plane_copies of the planes (same contents, other
  // memory): rows of several sessions in one launch.
  size_t plane_copies = 1;
};
// Runs the attention of c over all its rows, then over its first n rows for
// each n of later_row_counts, all on one scratch, and raises InternalError
// unless every later launch gives each row the first launch's bits.
void attention_on_shared_scratch(const AttentionCase& c, const std::vector<size_t>& later_row_counts);
// The attention that also quantizes its output (Q8_0 / Q8_1) for the output
// projection, as the backend runs it before such a matvec.
NormQuantized attention_quantized(const AttentionCase& c, ActivationFormat format);
std::vector<float> attention(const AttentionCase& c);
// Mean microseconds of the attention launch(es) of case c over `reps` runs,
// each with the KV evicted from L2 first (for benchmarks/bench_cuda_attention.py).
double attention_time_us(const AttentionCase& c, int reps);

// The tensor-core GEMM's checks (tests/cuda/test_cuda_ops.py) and timing
// (benchmarks/bench_cuda_gemm.py). matvec_groups: matvec's product with the
// rows sent as consecutive groups of group_rows (1..4) rows, one matvec call
// (a decode group) each. gemm_mma: the product through the tensor-core GEMM
// itself at any row count (types and matrices it refuses throw
// InvalidArgument), on the packed copy where gemm_packs(type) and `packed`,
// else on the blocks (the first version). matvec_time_us: mean microseconds of matvec's one call
// (group_rows 0) or of the groups, over `reps` back-to-back runs on one
// stream with the activations already quantized.
std::vector<float> matvec_groups(DType type, const uint8_t* w, size_t n_out, size_t k, const float* x, size_t n_rows,
                                 size_t group_rows);
std::vector<float> gemm_mma(DType type, const uint8_t* w, size_t n_out, size_t k, const float* x, size_t n_rows,
                            bool packed);
double matvec_time_us(DType type, const uint8_t* w, size_t n_out, size_t k, const float* x, size_t n_rows,
                      size_t group_rows, int reps);

// Device memory free right now (bytes).
size_t device_free_bytes();

// The shared memory a block may opt in to on this device (bytes), and
// whether Q4_0's prefill GEMM takes its packed kernel here (the kernel's
// blocks fit that; else v1 reads the blocks and no copy is made).
size_t shared_memory_per_block_optin();
bool gemm_packs(DType type);

// Whether attention of this head layout runs on the tensor cores
// (attention_mma.cu) rather than the scalar kernels.
bool attention_uses_tensor_cores(size_t n_head, size_t n_head_kv, size_t head_dim_k, size_t head_dim_v);

// Holds `bytes` of device memory until release() or destruction, so tests
// can run the out-of-memory paths on a large GPU. Throws DeviceMemoryError
// when the device cannot give that much.
class DeviceMemoryHold {
 public:
  explicit DeviceMemoryHold(size_t bytes);
  ~DeviceMemoryHold() { release(); }
  DeviceMemoryHold(const DeviceMemoryHold&) = delete;
  DeviceMemoryHold& operator=(const DeviceMemoryHold&) = delete;
  void release() noexcept;

 private:
  void* ptr_ = nullptr;
};

}  // namespace muser::cuda_testing
