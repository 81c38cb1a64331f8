// The decode matvec of 3..4-row groups on the tensor cores, reading the
// GGUF Q4_0 blocks themselves (ops_matvec_decode_mma.cu reads the packed
// GEMM copy instead and says why the tensor cores pay at 3..4 rows).
//
// Why: the packed copy spends 20 bytes a unit (the scale widened to a
// float) against the block's 18, and pads each class's units to the walk's
// step count (llama3-8b's ffn_down: 14 units a class walked as 16), so the
// packed kernel read 4,633 MiB a llama3-8b step against 4,026 MiB of
// blocks, +15% (session 16). Here a block streams its outputs' rows in
// memory order, 16-byte copies of whole runs of blocks, and the group's
// activations beside them, stage by stage: no copy of the whole k before
// the first MMA either.
//
// Exactly the bits of every other matvec: a 16-output tile's warp keeps
// one accumulator per (class, output, row) in registers (a class is matvec
// lane l = bitrev5(class), units l, l + 32, ... in increasing order), so
// walking the units in memory order adds each class's terms in its own
// order; the term is the packed kernel's (the MMA's exact int32 block sum
// from the magic-number start, then q4_0_magic_term), and at the end the
// classes fold in the balanced tree the packed walk pushes its leaves onto
// (which adds what warp_sum's butterfly adds). Units past the row are not
// walked: the packed walk adds +0.0f for them, which leaves every sum as it
// is (a sum that starts at +0.0f is never -0.0f). The tile's classes are
// cut into kSplit = 4 or 8 subtrees of 32 / kSplit consecutive classes,
// each its own warp: class c's lane has the low bits rev(c's high bits),
// so subtree s takes the units u with u % kSplit = rev(s), 8 of every
// 8 kSplit; the block joins the subtrees at the tree's nodes
// (matvec_mma_lane.cuh). Fewer subtrees would hold 16 or 32 classes'
// accumulators a lane, which ptxas put in local memory at the 128
// registers two blocks an SM allow.
//
// A stage is 8 kSplit consecutive units of the block's 128 / kSplit
// outputs (8 a warp): each output's run of blocks (144 kSplit bytes, a
// whole number of 16-byte pieces because rows hold a multiple of 8 units),
// then the group's activation quants and scales of those units. A lane's
// A words (4 bytes at 2 + 4 t of an 18-byte block) sit at 2-byte
// alignment: two aligned loads and a funnel shift.
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "backend/cuda/cuda_device.h"
#include "backend/cuda/cuda_error.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/dependent_launch.cuh"
#include "backend/cuda/gemm_mma_parts.cuh"
#include "backend/cuda/launch_targets.cuh"
#include "backend/cuda/matvec_decode_kernel.cuh"
#include "backend/cuda/matvec_mma_lane.cuh"
#include "core/error.h"

namespace muser::cuda::mma_decode {
namespace {

using gemm::kMagicBits;

constexpr int kQ4Bytes = 18;  // a Q4_0 block: the f16 scale, 16 bytes of nibbles
constexpr int kGroupRows = 4;
constexpr int kRing = 4;  // stages in shared memory: kRing - 1 in flight while one computes

// A stage's shared-memory layout for kSplit subtrees a tile.
template <int kSplit>
struct Stage {
  static constexpr int kOuts = 16 * (kWarps / kSplit);    // the block's outputs
  static constexpr int kUnits = 8 * kSplit;               // units a stage, 8 a warp
  static constexpr int kRunBytes = kQ4Bytes * kUnits;     // one output's blocks
  static constexpr int kRunPieces = kRunBytes / 16;
  // Runs kept so that the 8 outputs a 32-bit load's lanes read sit 4, 12,
  // 20 or 28 banks apart (4 t more for word t): no bank conflicts.
  static constexpr int kRunStride = kRunBytes + ((kRunBytes / 4) % 8 == 0 ? 16 : 0);
  static constexpr int kWBytes = kOuts * kRunStride;
  static constexpr int kActStride = 32 * kUnits + 16;  // a row's quants; rows 4 banks apart
  static constexpr int kActBytes = kGroupRows * kActStride;
  static constexpr int kScaleBytes = kGroupRows * kUnits * 4;
  static constexpr int kBytes = kWBytes + kActBytes + kScaleBytes;
};

__host__ __device__ constexpr int bitrev5_constexpr(int i) {
  return ((i & 1) << 4) | ((i & 2) << 2) | (i & 4) | ((i & 8) >> 2) | ((i & 16) >> 4);
}
// The class, within its subtree, of a warp's slot j: stages start at
// multiples of 32 units, so slot j is always lane (j kSplit + rev(split))
// % 32, whose class is bitrev5 of that: bitrev5((j kSplit) % 32) past the
// subtree's first class (kSplit 4 or 8: rev(split) holds the low bits).
template <int kSplit>
__host__ __device__ constexpr int slot_class(int j) {
  return bitrev5_constexpr((j * kSplit) % 32);
}

__device__ __forceinline__ unsigned lds32(unsigned addr) {
  unsigned v;
  asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(addr));
  return v;
}
__device__ __forceinline__ uint16_t lds16(unsigned addr) {
  uint16_t v;
  asm volatile("ld.shared.u16 %0, [%1];\n" : "=h"(v) : "r"(addr));
  return v;
}

// Grid: blocks of kWarps warps over the targets' outputs, 128 / kSplit a
// block, target after target. Dynamic shared memory: kRing stages (the
// join reuses them at the end).
template <int kRows, int kSplit, int kEpilogue>
__global__ void __launch_bounds__(kWarps * 32, 2)
    matvec_mma_blocks_kernel(DecodeTargets targets, int n_units, ActivationView x, DecodeEpilogue epilogue) {
  static_assert(kSplit == 4 || kSplit == 8, "stages of whole multiples of 32 units; registers for 8 or 4 classes");
  using S = Stage<kSplit>;
  constexpr int kClasses = 32 / kSplit;
  extern __shared__ int4 smem_blocks[];
  const unsigned base = smem_addr(smem_blocks);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int split = warp % kSplit;
  const BlockTarget bt = block_target(targets, blockIdx.x);
  const size_t block_out0 = static_cast<size_t>(blockIdx.x - bt.first) * S::kOuts;
  const Lane me = lane_of(block_out0 + 16 * (warp / kSplit), split, bt);
  const int n_stages = (n_units + S::kUnits - 1) / S::kUnits;
  const size_t row_bytes = static_cast<size_t>(n_units) * kQ4Bytes;

  // The units stage s holds: kUnits, fewer in a row's last stage.
  auto stage_units = [&](int s) { return min(S::kUnits, n_units - s * S::kUnits); };
  // Stage s's copies (none past the last stage; outputs past the matrix and
  // units past the row are left as they are and never stored).
  auto issue_weights = [&](int s) {
    if (s >= n_stages) return;
    const int pieces = stage_units(s) * kQ4Bytes / 16;
    const unsigned dst = base + static_cast<unsigned>((s % kRing) * S::kBytes);
    const uint8_t* src = bt.w + block_out0 * row_bytes + static_cast<size_t>(s) * S::kRunBytes;
    for (int i = tid; i < S::kOuts * S::kRunPieces; i += kWarps * 32) {
      const int o = i / S::kRunPieces, p = i % S::kRunPieces;
      if (p < pieces && block_out0 + o < bt.n_out) {
        cp_async16_to(dst + o * S::kRunStride + 16 * p, src + o * row_bytes + 16 * p, 16);
      }
    }
  };
  auto issue_activations = [&](int s) {
    if (s >= n_stages) return;
    const int units = stage_units(s);
    const unsigned dst = base + static_cast<unsigned>((s % kRing) * S::kBytes + S::kWBytes);
    constexpr int kQPieces = S::kUnits * 2, kDPieces = S::kUnits / 4, kPieces = kQPieces + kDPieces;
    const size_t u0 = static_cast<size_t>(s) * S::kUnits;
    for (int i = tid; i < kRows * kPieces; i += kWarps * 32) {
      const int r = i / kPieces, p = i % kPieces;
      if (p < kQPieces) {
        if (p < 2 * units) {
          cp_async16_to(dst + r * S::kActStride + 16 * p, x.q + (r * static_cast<size_t>(n_units) + u0) * 32 + 16 * p,
                        16);
        }
      } else if (p - kQPieces < units / 4) {
        cp_async16_to(dst + S::kActBytes + r * S::kUnits * 4 + 16 * (p - kQPieces),
                      x.d + r * static_cast<size_t>(n_units) + u0 + 4 * (p - kQPieces), 16);
      }
    }
  };

  // The RoPE angles wait in shared memory past the ring for the split-0
  // warps that store (held in registers through the walk, they pushed the
  // q/k/v launch's split-4 kernel past 128 registers into spills).
  float4* angles = reinterpret_cast<float4*>(reinterpret_cast<uint8_t*>(smem_blocks) + kRing * S::kBytes) +
                   (warp / kSplit) * 32 + lane;
  if constexpr (kEpilogue == kEpilogueRopeKv) {
    if (split == 0) {
      float2 angle[2];
      rope_angles<kRows, kEpilogue>(me, bt, epilogue, angle);
      *angles = make_float4(angle[0].x, angle[0].y, angle[1].x, angle[1].y);
    }
  }
  // The weights of the first kRing - 1 stages go out before the wait (no
  // kernel writes them), the activations after it, all in one group.
#pragma unroll
  for (int s = 0; s < kRing - 1; ++s) {
    issue_weights(s);
    cp_async_commit();
  }
  dependent_launch_begin();
#pragma unroll
  for (int s = 0; s < kRing - 1; ++s) issue_activations(s);
  cp_async_commit();

  // This warp's units of a stage: slot j is unit j kSplit + rev(split), the
  // split's bits reversed (log2 kSplit of them).
  constexpr int kSplitBits = kSplit == 4 ? 2 : 3;
  const int unit0 = static_cast<int>(__brev(static_cast<unsigned>(split)) >> (32 - kSplitBits));
  const bool upper = t >= 2;  // this lane's output is g + 8
  const unsigned run_lo = static_cast<unsigned>(((warp / kSplit) * 16 + g) * S::kRunStride);
  const unsigned run_hi = run_lo + 8 * S::kRunStride;
  const unsigned act_b = static_cast<unsigned>(S::kWBytes + (g % 4) * S::kActStride + 4 * t);
  const unsigned act_d = static_cast<unsigned>(S::kWBytes + S::kActBytes + me.r0 * S::kUnits * 4);
  float acc[kClasses][2];
#pragma unroll
  for (int c = 0; c < kClasses; ++c) acc[c][0] = acc[c][1] = 0.0f;

  auto compute_slot = [&]<int kSlot>(unsigned stage, int units) {
    const int su = kSlot * kSplit + unit0;  // the unit within the stage
    if (su >= units) return;
    const unsigned at = static_cast<unsigned>(su * kQ4Bytes);
    const unsigned word = at + 2 + 4 * t, aligned = word & ~3u, shift = (word & 2u) * 8;
    const unsigned wg = __funnelshift_r(lds32(stage + run_lo + aligned), lds32(stage + run_lo + aligned + 4), shift);
    const unsigned wg8 = __funnelshift_r(lds32(stage + run_hi + aligned), lds32(stage + run_hi + aligned + 4), shift);
    // The packed copy's scale and nibbles from the block's, so that the
    // operands and the term are the packed kernels'.
    const float wd = f16_bits_to_f32(lds16(stage + (upper ? run_hi : run_lo) + at));
    const gemm::Q4_0Scale ws = gemm::q4_0_scale(gemm::packed_scale(wd));
    const unsigned pw = gemm::q4_0_packed_word(wg), pw8 = gemm::q4_0_packed_word(wg8);
    int a[4];
    a[0] = gemm::packed_low_bytes(pw);
    a[1] = gemm::packed_low_bytes(pw8);
    a[2] = gemm::packed_high_bytes(pw);
    a[3] = gemm::packed_high_bytes(pw8);
    const unsigned b_at = stage + act_b + static_cast<unsigned>(su * 32);
    const int b0 = static_cast<int>(lds32(b_at)), b1 = static_cast<int>(lds32(b_at + 16));
    const unsigned d_at = stage + act_d + static_cast<unsigned>(su * 4);
    const float ad0 = __uint_as_float(lds32(d_at)), ad1 = __uint_as_float(lds32(d_at + S::kUnits * 4));
    int d[4];
    gemm::mma_s8(d, a, b0, b1, kMagicBits);
    const int s0 = upper ? d[2] : d[0], s1 = upper ? d[3] : d[1];
    constexpr int c = slot_class<kSplit>(kSlot);
    acc[c][0] = gemm::q4_0_magic_term(acc[c][0], s0, ws, ad0);
    acc[c][1] = gemm::q4_0_magic_term(acc[c][1], s1, ws, ad1);
  };
  // At stage s its copies have landed (stage 0: every group of the
  // prologue; later: all but the kRing - 2 newest), the barrier makes every
  // thread's visible and says every warp is done with stage s - 1, whose
  // buffer then receives stage s + kRing - 1.
  for (int s = 0; s < n_stages; ++s) {
    if (s == 0) {
      cp_async_wait<0>();
    } else {
      cp_async_wait<kRing - 2>();
    }
    __syncthreads();
    issue_weights(s + kRing - 1);
    issue_activations(s + kRing - 1);
    cp_async_commit();  // empty groups past the last stage keep the wait count uniform
    if (!me.active) continue;
    const unsigned stage = base + static_cast<unsigned>((s % kRing) * S::kBytes);
    const int units = stage_units(s);
    [&]<int... kSlots>(std::integer_sequence<int, kSlots...>) {
      (compute_slot.template operator()<kSlots>(stage, units), ...);
    }(std::make_integer_sequence<int, 8>());
  }
  cp_async_wait<0>();

  // The subtree's total: its classes folded pairwise, level by level.
#pragma unroll
  for (int width = kClasses; width > 1; width /= 2) {
#pragma unroll
    for (int c = 0; c < width / 2; ++c) {
      acc[c][0] = acc[2 * c][0] + acc[2 * c + 1][0];
      acc[c][1] = acc[2 * c][1] + acc[2 * c + 1][1];
    }
  }
  const float total[2] = {acc[0][0], acc[0][1]};
  float2 angle[2] = {make_float2(1.0f, 0.0f), make_float2(1.0f, 0.0f)};
  if constexpr (kEpilogue == kEpilogueRopeKv) {
    if (split == 0) {
      const float4 a = *angles;
      angle[0] = make_float2(a.x, a.y);
      angle[1] = make_float2(a.z, a.w);
    }
  }
  __syncthreads();  // every warp is past the ring, which the join reuses
  join_and_store<kRows, kSplit, kEpilogue>(total, reinterpret_cast<float*>(smem_blocks), me, bt, epilogue, angle);
}

// The ring, then (kEpilogueRopeKv) each tile's lanes' RoPE angles.
template <int kSplit>
constexpr size_t stage_smem(int epilogue = kEpilogueNone) {
  return static_cast<size_t>(kRing) * Stage<kSplit>::kBytes +
         (epilogue == kEpilogueRopeKv ? (kWarps / kSplit) * 32 * sizeof(float4) : 0);
}
static_assert(stage_smem<4>() >= kJoinBytes, "the join reuses the ring");

}  // namespace

bool launch_blocks(const MatvecTarget* targets, size_t count, const ActivationView& x, size_t n_rows, int split,
                   const RopeKvTail* rope, cudaStream_t stream) {
  const size_t n_units = x.k / 32;
  // Runs of whole 16-byte pieces: rows of a multiple of 8 blocks from
  // 16-byte aligned starts, the activations' rows too.
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (x.format != ActivationFormat::Q8_0 || n_rows < 1 || n_rows > 4 || count < 1 || count > kMaxDecodeTargets ||
      x.k % 32 != 0 || n_units % 8 != 0 || n_units == 0 || !aligned(x.q) || !aligned(x.d)) {
    return false;
  }
  size_t tiles16 = 0;
  for (size_t p = 0; p < count; ++p) {
    if (targets[p].n_out != 0 && !aligned(targets[p].w)) return false;
    tiles16 += (targets[p].n_out + 15) / 16;
  }
  if (tiles16 == 0) return true;
  // 8 subtrees where a block per tile still runs in one wave (llama3-8b's
  // o and ffn_down on 132 SMs), else 4: pick_split's choice, at least 4.
  const int s = split != 0 ? split
                           : std::max(4, pick_split(tiles16, blocks_per_sm(stage_smem<8>(kEpilogueRopeKv)),
                                                    [](int) { return true; }));
  if (s != 4 && s != 8) {
    throw InvalidArgument("[cuda matvec] the tensor-core decode matvec on the blocks cuts a tile's classes into 4 or "
                          "8 subtrees, not " + std::to_string(s));
  }
  const DecodeEpilogue epilogue = rope != nullptr ? rope_kv_epilogue(*rope) : DecodeEpilogue{};
  auto launch = [&]<int kRows, int kSplit, int kEpilogue>() {
    unsigned blocks = 0;
    const DecodeTargets t = decode_targets(targets, count, Stage<kSplit>::kOuts, false, blocks);
    auto kernel = matvec_mma_blocks_kernel<kRows, kSplit, kEpilogue>;
    constexpr size_t smem = stage_smem<kSplit>(kEpilogue);
    // Once per kernel (not inside a graph capture).
    static const cudaError_t opted_in =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    check_cuda(opted_in, "cudaFuncSetAttribute(matvec_mma_blocks)");
    launch_dependent(kernel, blocks, kWarps * 32, smem, stream, t, static_cast<int>(n_units), x, epilogue);
    check_launch("matvec (decode, tensor cores, blocks)");
  };
  auto with_epilogue = [&]<int kRows, int kSplit>() {
    if (rope != nullptr) {
      launch.template operator()<kRows, kSplit, kEpilogueRopeKv>();
    } else {
      launch.template operator()<kRows, kSplit, kEpilogueNone>();
    }
  };
  auto with_split = [&]<int kRows>() {
    if (s == 4) {
      with_epilogue.template operator()<kRows, 4>();
    } else {
      with_epilogue.template operator()<kRows, 8>();
    }
  };
  switch (n_rows) {
    case 1: with_split.template operator()<1>(); break;
    case 2: with_split.template operator()<2>(); break;
    case 3: with_split.template operator()<3>(); break;
    default: with_split.template operator()<4>(); break;
  }
  return true;
}

}  // namespace muser::cuda::mma_decode
