// The targets of one launch over several matrices that read the same
// activations (a layer's q, k and v; gate and up): the decode matvec's
// blocks and the packed GEMM's output tiles are numbered target after
// target, and each block finds its own.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_ops.h"

namespace muser::cuda {

// Up to kMaxDecodeTargets matrices that read the same activations (a
// layer's q, k and v; gate and up), launched as one grid: target p owns
// blocks (the GEMM: output tiles) [first_block[p], first_block[p + 1]);
// a launch of fewer targets sets the others' first_block to its total.
struct DecodeTargets {
  const uint8_t* w[kMaxDecodeTargets];
  float* y[kMaxDecodeTargets];
  size_t n_out[kMaxDecodeTargets];
  size_t ld_y[kMaxDecodeTargets];
  unsigned first_block[kMaxDecodeTargets + 1];
};

// The DecodeTargets of `count` (0..kMaxDecodeTargets) targets, each owning
// ceil(n_out / outputs_per_block) blocks, with weights `packed` ? the GEMM's
// packed copies : the GGUF blocks; `blocks` receives the total.
inline DecodeTargets decode_targets(const MatvecTarget* targets, size_t count, size_t outputs_per_block, bool packed,
                                    unsigned& blocks) {
  DecodeTargets t{};
  blocks = 0;
  for (size_t p = 0; p < kMaxDecodeTargets; ++p) {
    t.first_block[p] = blocks;
    if (p < count) {
      t.w[p] = static_cast<const uint8_t*>(packed ? targets[p].w_packed : targets[p].w);
      t.y[p] = targets[p].y;
      t.n_out[p] = targets[p].n_out;
      t.ld_y[p] = targets[p].ld_y;
      blocks += ceil_div(targets[p].n_out, outputs_per_block);
    }
  }
  t.first_block[kMaxDecodeTargets] = blocks;  // targets past count own no block
  return t;
}

// Block b's target (p, its index) and the target's fields, by selects (a
// dynamic index into the parameter arrays would go through local memory).
struct BlockTarget {
  int p;
  const uint8_t* w;
  float* y;
  size_t n_out, ld_y;
  unsigned first;  // the target's first block
};

__device__ __forceinline__ BlockTarget block_target(const DecodeTargets& targets, unsigned b) {
  static_assert(kMaxDecodeTargets == 3, "the selects below name three targets");
  BlockTarget t;
  t.p = b >= targets.first_block[1] ? (b >= targets.first_block[2] ? 2 : 1) : 0;
  const int p = t.p;
  t.w = p == 0 ? targets.w[0] : p == 1 ? targets.w[1] : targets.w[2];
  t.y = p == 0 ? targets.y[0] : p == 1 ? targets.y[1] : targets.y[2];
  t.n_out = p == 0 ? targets.n_out[0] : p == 1 ? targets.n_out[1] : targets.n_out[2];
  t.ld_y = p == 0 ? targets.ld_y[0] : p == 1 ? targets.ld_y[1] : targets.ld_y[2];
  t.first = p == 0 ? targets.first_block[0] : p == 1 ? targets.first_block[1] : targets.first_block[2];
  return t;
}

}  // namespace muser::cuda
