// Prefill matmul on the tensor cores (int8 mma.sync m16n8k32, sm_80+) for
// the 32-element quant types, bitwise the matvec's result for every output.
//
// Why this order: a row's logits must not depend on whether the row went
// through this GEMM (a prefill chunk) or through matvec_kernel (a decode
// group of 1..4 rows, a 1-row tail chunk). The matvec computes an output as
//   lane l (0..31): acc_l = 0; for u = l, l+32, ... : acc_l = add_unit_term(acc_l, unit u)
//   then warp_sum: xor butterfly 16, 8, 4, 2, 1 over the 32 lane partials.
// With float + commutative, the butterfly is a balanced binary tree whose
// leaves, left to right, are the lanes in bit-reversed order (leaf i is lane
// bitrev5(i)): its first level pairs lanes that differ in bit 4. So here each
// output walks "classes" i = 0..31, lane l = bitrev5(i): the class's units
// l, l+32, ... in increasing order accumulate into one float exactly as lane
// l does (T::add_scaled is the float part of T::add_dot, shared by both kernels,
// and the build has --fmad=false), and the class partial is pushed onto a
// 5-level pairwise stack (a binary counter) that adds siblings as the tree
// does. Lanes without units give 0.0f leaves here too.
// tests/backend/test_cuda_gemm_order.py checks the tree equivalence on
// float32 in numpy; tests/cuda/test_cuda_ops.py checks the GEMM against the
// matvec bitwise.
//
// The int32 block sum of a unit is exact from the MMA: one k32 step is one
// 32-element unit, with the int8 weights as T::load decodes them. The MMA
// accumulator starts at 1.5 * 2^23 (as int bits), so its result read as a
// float minus 1.5 * 2^23 is the sum converted exactly (|sum| < 2^22 for every
// type here), which is static_cast<float>(sum) without the slow I2F.
//
// The versions: ops_gemm_mma_packed.cu's kernel for Q4_0 and Q4_K weights
// that have a packed copy (the backend makes one at upload when it fits:
// 1.8x v1 on the H200 for Q4_0), ops_gemm_mma_v1.cu's (8 warps of 32 x 16
// outputs on the GGUF blocks) for the other types and for those without a
// copy. MUSER_CUDA_GEMM=v1
// runs v1 for every type and makes no copies (the way back).
// gemm_mma_parts.cuh holds what the versions share. Two other kernels
// (16 warps with the upper tree levels in shared memory; TMA copies) ran
// bitwise-clean on the H200 and no faster than packed; they were removed and
// are in the history of branch cuda-gemm4 (commits 118e158, c09aa4d).
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "backend/cuda/cuda_error.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/dependent_launch.cuh"
#include "backend/cuda/gemm_mma_parts.cuh"
#include "core/env_switch.h"
#include "core/error.h"

namespace muser::cuda {
namespace gemm {
namespace {

// The kernel version gemm_mma runs (MUSER_CUDA_GEMM, read once; both
// compute the same bits): by default the packed kernel for Q4_0 and Q4_K
// weights with a packed copy and v1 for the rest; "v1" v1 for every type, with no packed
// copies.
constexpr int kPackedVersion = 5;
int requested_version() {
  static const int version = env_is("MUSER_CUDA_GEMM", "v1") ? 1 : kPackedVersion;
  return version;
}

}  // namespace
}  // namespace gemm

bool has_gemm_mma(DType type) {
  switch (type) {
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q8_0:
      return true;
    case DType::Q4_K: {
      // MUSER_CUDA_GEMM_K=0 leaves Q4_K to the matvec tiles, for A/B runs
      // (the same bits); read once.
      static const bool k_quants = !env_is("MUSER_CUDA_GEMM_K", "0");
      return k_quants;
    }
    default:
      return false;
  }
}

// Q4_0 and Q4_K (unless MUSER_CUDA_GEMM_K=0 leaves Q4_K to the matvec
// tiles) under the default version, on a device whose blocks may take the
// packed kernel's shared memory (elsewhere v1 reads the blocks, and no copy
// is made).
bool gemm_packs(DType type) {
  return (type == DType::Q4_0 || (type == DType::Q4_K && has_gemm_mma(type))) &&
         gemm::requested_version() == gemm::kPackedVersion && gemm::packed_block_fits(type, false);
}

size_t gemm_packed_weight_bytes(DType type, size_t n_out, size_t k) {
  return gemm_packs(type) ? gemm::packed_weight_bytes(type, n_out, k) : 0;
}

void gemm_pack_weights(DType type, const void* w, size_t n_out, size_t k, void* dst, void* stream) {
  if (!gemm_packs(type)) {
    throw InternalError(std::string("[cuda gemm_pack_weights] the GEMM packs no ") + dtype_info(type).name);
  }
  gemm::pack_weights(type, w, n_out, k, dst, static_cast<cudaStream_t>(stream));
}

size_t gemm_activation_pack_bytes(ActivationFormat format, size_t n_rows, size_t k) {
  if (n_rows < kGemmMinRows) return 0;
  for (DType type : {DType::Q4_0, DType::Q4_K}) {
    if (format == activation_format(type) && gemm_packs(type)) return gemm::packed_activation_bytes(type, n_rows, k);
  }
  return 0;
}

namespace {

// Whether the GEMM takes weights w (n_out rows) of `type` with activations
// x: types with has_gemm_mma, the activation format they need (else an
// InternalError), and the alignment its copies need.
bool gemm_takes(DType type, const void* w, size_t n_out, const ActivationView& x) {
  if (!has_gemm_mma(type)) return false;
  if (x.format != activation_format(type) || x.k % 32 != 0) {
    throw InternalError(std::string("[cuda gemm_mma] ") + dtype_info(type).name + " weights need " +
                        activation_format_name(activation_format(type)) + " activations of a 32-multiple length");
  }
  // The copies move whole 4-byte words of the weights and 16-byte halves of
  // activation blocks: the matrix must start and end 4-byte aligned (a slice
  // at an odd 2-byte offset, or an odd number of odd-length rows, is left to
  // the matvec tiles).
  const size_t row_bytes = x.k / dtype_info(type).block_elems * dtype_info(type).block_bytes;
  if (reinterpret_cast<uintptr_t>(w) % 4 != 0 || (n_out * row_bytes) % 4 != 0 ||
      reinterpret_cast<uintptr_t>(x.q) % 16 != 0) {
    return false;
  }
  // The kernels' offsets inside a 64-row tile of either operand are 32-bit.
  return gemm::kTileRows * std::max(row_bytes, x.k) < (size_t{1} << 32);
}

// Whether the packed version runs: a packed copy of w and room for x's.
bool packed_for(DType type, const void* w_packed, const ActivationView& x) {
  return w_packed != nullptr && x.gemm_pack != nullptr && gemm_packs(type);
}

}  // namespace

bool gemm_mma(DType type, const void* w, size_t n_out, const ActivationView& x, size_t n_rows, float* y, size_t ld_y,
              void* stream_ptr, const void* w_packed) {
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  if (!gemm_takes(type, w, n_out, x)) return false;
  if (n_rows == 0 || n_out == 0) return true;
  // The packed operands: the weights' copy from gemm_pack_weights, room for
  // the activations' in the view (sized for at least n_rows rows).
  if (packed_for(type, w_packed, x)) {
    const MatvecTarget target{w, n_out, y, ld_y, w_packed};
    gemm::launch_gemm_packed(type, &target, 1, x, n_rows, stream);
    return true;
  }
  gemm::launch_gemm_v1(type, w, n_out, x, n_rows, y, ld_y, stream);
  return true;
}

bool gemm_mma_targets(DType type, const MatvecTarget* targets, size_t count, const ActivationView& x, size_t n_rows,
                      void* stream) {
  if (count == 0 || count > kMaxDecodeTargets) return false;
  for (size_t i = 0; i < count; ++i) {
    if (!gemm_takes(type, targets[i].w, targets[i].n_out, x) || !packed_for(type, targets[i].w_packed, x)) {
      return false;
    }
  }
  gemm::launch_gemm_packed(type, targets, count, x, n_rows, static_cast<cudaStream_t>(stream));
  return true;
}

}  // namespace muser::cuda
