// The decode matvec of 3..4-row groups on the tensor cores, for Q4_0
// weights with the packed GEMM's copy (gemm_mma_parts.cuh: kWChunk), and
// the entry points of both tensor-core decode kernels: with
// MUSER_CUDA_DECODE_MMA_BLOCKS=1 (below: kBlocksByDefault), rows of a
// multiple of 8 blocks go to the kernel on the GGUF blocks first
// (ops_matvec_decode_mma_blocks.cu, fewer bytes), the rest come here.
//
// Why: matvec_decode_kernel spends eight dp4a per weight unit per row plus
// the unit's decode and the activation loads, about 4.7 warp instructions
// per weight unit at 4 rows (its SASS, llama3-8b's gate/up config): as many
// issue cycles as the unit's bytes take to arrive. One int8 MMA (m16n8k32)
// gives 16 weight rows' block sums for all rows at once; what is left per
// (output, row, unit) is the float term, about 2 warp instructions per
// weight unit in all. Measured (H100s, dependent launch off, llama3-8b
// Q4_0, 4 rows, session 16; the dp4a figures from the call before):
// gate/up and the output matrix 1,069 against 1,152 us a step, ffn_down and
// o 936 against 1,030; the q/k/v launch with its RoPE 13.1 against 11.3 us
// a layer. Whole steps with dependent launch: +2.5%
// for llama3-8b, +17% for smollm2-135m (bench_cuda.py, 4 sequences).
//
// Exactly the matvec's bits (every config's, the prefill tiles', the
// GEMM's): the packed copy lists each 64-output tile's units in the GEMM's
// walk (gemm_mma_parts.cuh, Walk), class by class (a class is matvec lane l
// = bitrev5(class): units l, l + 32, ... in increasing order), and the term
// is the GEMM's (the exact int32 block sum from the magic-number start,
// then q4_0_magic_term: T::add_scaled's bits; zero terms for the padding
// units). Each class's sum is pushed as a leaf onto a balanced tree of the
// 32 classes, which adds what warp_sum's butterfly adds. The tree may be
// cut into kSplit subtrees of 32 / kSplit consecutive leaves (whole
// stages), each walked by its own warp of the block; the block then joins
// the subtrees' totals at the tree's own nodes. So a row's bits do not
// depend on the split, the group or the block.
//
// Operands: A (16 x 32, the MMA's rows) is 16 outputs' weights, unit by
// unit: lane (g, t) holds word t of outputs g and g + 8 (packed: 16 bytes
// per output and 4 slots, the low nibbles for k 4t.., the high ones for
// 16 + 4t..). B (32 x 8) is the activations: column c is row c % 4 of the
// group (zeros past the group), from shared memory where the block first
// lays out the whole k of the group's rows in walk order. With every row
// twice among the 8 columns, each lane owns two of the tile's 64 (output,
// row) sums: lanes t = 0, 1 output g, lanes t = 2, 3 output g + 8, rows
// 2 (t % 2) and 2 (t % 2) + 1.
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
#include "core/env_switch.h"
#include "core/error.h"

namespace muser::cuda {
namespace {

using gemm::kMagicBits;
using gemm::kStageUnits;
using gemm::kWChunk;
using gemm::kWQBytes;
using gemm::Walk;

using mma_decode::kJoinBytes;
using mma_decode::kWarps;
constexpr int kGroupRows = 4;  // activation rows the shared layout holds (zeros past the group)
// One stage of the group's activations in shared memory: per slot, per row,
// per lane t the words t and t + 4 of the unit's quants (B's b0, b1), then
// per slot the rows' scales.
constexpr int kActStageQBytes = kStageUnits * kGroupRows * 4 * 8;
constexpr int kActStageBytes = kActStageQBytes + kStageUnits * kGroupRows * 4;

// A warp's ring of kRing stage buffers in shared memory, each one stage of
// its 16 outputs' packed weights: the quants (16 outputs x 8 pieces of 16
// bytes, piece c of output o at c ^ (o % 8) so that the 8 lanes of a
// 128-bit shared load hit 8 different bank groups) and the two n8 tiles'
// scales as packed. cp.async keeps kRing - 1 stages in flight per warp
// while it computes one. (Against two stages held in registers, session
// 16 measured the same gate/up launch, 32.4 against 32.7 us a step's
// average with the output matrix, and ffn_down 21.0 against 22.4 us.)
constexpr int kRing = 4;
constexpr int kWStageQBytes = 16 * 128;
constexpr int kWStageBytes = kWStageQBytes + 2 * 256;
constexpr int kRingBytes = kRing * kWStageBytes;  // per warp

__device__ __forceinline__ int4 lds128(unsigned addr) {
  int4 v;
  asm volatile("ld.shared.v4.s32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr));
  return v;
}

template <int kSlot>
__device__ __forceinline__ unsigned slot_word(const int4& v) {
  constexpr int w = kSlot % 4;
  return static_cast<unsigned>(w == 0 ? v.x : w == 1 ? v.y : w == 2 ? v.z : v.w);
}

// Grid: blocks of kWarps warps over the targets' 16-output tiles, target
// after target (8 / kSplit tiles a block). Dynamic shared memory: the
// group's activations (n_stages * kActStageBytes), the join area, then
// each warp's weight ring.
// kEpilogue: kEpilogueNone stores the outputs; kEpilogueRopeKv (targets q,
// k, v) rotates q and k and stores the rotated k and v into the layer's KV
// planes as matvec_decode_kernel's epilogue does (matvec_decode_kernel.cuh),
// the pair's other element from the lane holding output ^ 1 (lane ^ 4).
template <int kP, int kRows, int kSplit, int kEpilogue>
__global__ void __launch_bounds__(kWarps * 32)
    matvec_mma_kernel(DecodeTargets targets, int stages_per_class, int n_units, ActivationView x,
                      DecodeEpilogue epilogue) {
  constexpr int kTilesPerBlock = kWarps / kSplit;
  // log2 of a subtree's classes: the level its last leaf's push ends at.
  constexpr int kTopLevel = 5 - (kSplit == 1 ? 0 : kSplit == 2 ? 1 : kSplit == 4 ? 2 : 3);
  static_assert(kSplit == 1 || kSplit == 2 || kSplit == 4 || kSplit == 8, "subtrees of whole powers of two");
  extern __shared__ int4 smem_mma[];
  uint8_t* smem = reinterpret_cast<uint8_t*>(smem_mma);
  const Walk<kP> walk{stages_per_class};
  const int n_stages = walk.n_stages();
  const int split_stages = n_stages / kSplit;

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int split = warp % kSplit;
  const BlockTarget bt = block_target(targets, blockIdx.x);
  const size_t tile16 = static_cast<size_t>(blockIdx.x - bt.first) * kTilesPerBlock + warp / kSplit;
  const size_t out0 = tile16 * 16;
  const mma_decode::Lane me = mma_decode::lane_of(out0, split, bt);
  const bool active = me.active;
  // This warp's stage s: the 2 KiB of quants of its outputs 16 (tile16 % 4)
  // .. + 15 and their 512 bytes of scales in chunk s of 64-output tile
  // tile16 / 4. Lane l copies 16-byte pieces l, l + 32, ..., l + 128 (the
  // last one of the scales) into the ring.
  const uint8_t* chunk = bt.w + ((tile16 / 4) * n_stages + static_cast<size_t>(split) * split_stages) * kWChunk;
  const unsigned q_src = static_cast<unsigned>(tile16 % 4) * kWStageQBytes;
  const unsigned d_src = kWQBytes + static_cast<unsigned>(tile16 % 4) * 512;
  const unsigned ring = smem_addr(smem) + static_cast<unsigned>(n_stages * kActStageBytes + kJoinBytes) +
                        static_cast<unsigned>(warp) * kRingBytes;
  auto issue = [&](int s) {
    if (active && s < split_stages) {
      const uint8_t* src = chunk + static_cast<size_t>(s) * kWChunk;
      const unsigned dst = ring + static_cast<unsigned>(s % kRing) * kWStageBytes;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int piece = lane + 32 * j, o = piece / 8, c = piece % 8;
        cp_async16_to(dst + o * 128 + 16 * (c ^ (o % 8)), src + q_src + 16 * piece, 16);
      }
      cp_async16_to(dst + kWStageQBytes + 16 * lane, src + d_src + 16 * lane, 16);
    }
    cp_async_commit();  // empty groups past the last stage keep the wait count uniform
  };
  // This lane's reads in a stage buffer: output g's pieces 2t, 2t + 1 and
  // output g + 8's; its output's scales (n8 tile t / 2, quad g / 2) per slot pair.
  const unsigned q_lo = static_cast<unsigned>(g * 128 + 16 * ((2 * t) ^ g));
  const unsigned q_hi = static_cast<unsigned>(g * 128 + 16 * ((2 * t + 1) ^ g));
  const unsigned d_at = static_cast<unsigned>(kWStageQBytes + ((t / 2) * 16 + g / 2) * 16);

  const int r0 = me.r0;
  const bool upper = t >= 2;  // this lane's output is g + 8
  float2 angle[2];
  mma_decode::rope_angles<kRows, kEpilogue>(me, bt, epilogue, angle);

  // The first kRing - 1 stages' weights go out before the wait: no kernel writes them.
#pragma unroll
  for (int s = 0; s < kRing - 1; ++s) issue(s);
  dependent_launch_begin();

  // The group's activations in walk order: item (stage, slot, row) is the
  // unit's 32 quants as (word t, word t + 4) pairs and its scale; zeros past
  // the rows and the units.
#pragma unroll 4
  for (int item = tid; item < n_stages * kStageUnits * kGroupRows; item += kWarps * 32) {
    const int row = item % kGroupRows, slot = item / kGroupRows % kStageUnits;
    const int stage = item / (kGroupRows * kStageUnits);
    const int u = walk.unit(stage, slot);
    int4 lo = make_int4(0, 0, 0, 0), hi = lo;
    float scale = 0.0f;
    if (row < kRows && u < n_units) {
      const int4* src = reinterpret_cast<const int4*>(x.q + (static_cast<size_t>(row) * n_units + u) * 32);
      lo = __ldg(src);
      hi = __ldg(src + 1);
      scale = __ldg(x.d + static_cast<size_t>(row) * n_units + u);
    }
    uint8_t* base = smem + stage * kActStageBytes;
    int4* q = reinterpret_cast<int4*>(base + (slot * kGroupRows + row) * 32);
    q[0] = make_int4(lo.x, hi.x, lo.y, hi.y);
    q[1] = make_int4(lo.z, hi.z, lo.w, hi.w);
    reinterpret_cast<float*>(base + kActStageQBytes)[slot * kGroupRows + row] = scale;
  }
  __syncthreads();

  // B: column g is row g % 4 of the group; this lane's sums are rows r0, r0 + 1.
  const unsigned b_off = static_cast<unsigned>(((g % 4) * 4 + t) * 8);
  float acc[2] = {0.0f, 0.0f};
  float stack[5][2];
#pragma unroll
  for (int lv = 0; lv < 5; ++lv) stack[lv][0] = stack[lv][1] = 0.0f;

  // One slot: the unit's MMA and this lane's two terms, then the class
  // push where a class of kP < 8 ends inside the stage (its leaf index's
  // trailing ones are the slot's, known here: stages hold whole classes).
  auto compute_slot = [&]<int kSlot>(const uint8_t* act, const int4 (&wq)[2][2], const float4 (&dq4)[4]) {
    const unsigned wg = slot_word<kSlot>(wq[0][kSlot / 4]);
    const unsigned wg8 = slot_word<kSlot>(wq[1][kSlot / 4]);
    // 16 (q - 8) per byte, as the packed GEMM's B (ops_gemm_mma_packed.cu).
    int a[4];
    a[0] = gemm::packed_low_bytes(wg);
    a[1] = gemm::packed_low_bytes(wg8);
    a[2] = gemm::packed_high_bytes(wg);
    a[3] = gemm::packed_high_bytes(wg8);
    const int2 b = *reinterpret_cast<const int2*>(act + kSlot * kGroupRows * 32 + b_off);
    const float2 ad = *reinterpret_cast<const float2*>(act + kActStageQBytes + (kSlot * kGroupRows + r0) * 4);
    int d[4];
    gemm::mma_s8(d, a, b.x, b.y, kMagicBits);
    const float4& dq = dq4[kSlot / 2];
    const gemm::Q4_0Scale ws =
        gemm::q4_0_scale(kSlot % 2 == 0 ? (g % 2 == 0 ? dq.x : dq.y) : (g % 2 == 0 ? dq.z : dq.w));
    const int s0 = upper ? d[2] : d[0], s1 = upper ? d[3] : d[1];
    acc[0] = gemm::q4_0_magic_term(acc[0], s0, ws, ad.x);
    acc[1] = gemm::q4_0_magic_term(acc[1], s1, ws, ad.y);
    if constexpr (kP < 8) {
      constexpr int kClass = kSlot / kP;
      if constexpr (kSlot % kP == kP - 1 && kClass < Walk<kP>::kClassesPerStage - 1) {
        gemm::push_leaf<gemm::trailing_ones(kClass)>(acc, stack);
      }
    }
  };
  auto compute_stage = [&](int s) {
    const uint8_t* act = smem + (split * split_stages + s) * kActStageBytes;
    const unsigned buf = ring + static_cast<unsigned>(s % kRing) * kWStageBytes;
    int4 wq[2][2];
    float4 dq4[4];
#pragma unroll
    for (int o = 0; o < 2; ++o) {
      wq[o][0] = lds128(buf + q_lo + 1024 * o);
      wq[o][1] = lds128(buf + q_hi + 1024 * o);
    }
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      const int4 v = lds128(buf + d_at + 64 * p);
      dq4[p] = make_float4(__int_as_float(v.x), __int_as_float(v.y), __int_as_float(v.z), __int_as_float(v.w));
    }
    [&]<int... kSlots>(std::integer_sequence<int, kSlots...>) {
      (compute_slot.template operator()<kSlots>(act, wq, dq4), ...);
    }(std::make_integer_sequence<int, kStageUnits>());
    // The stage's last class ends here (kP == 8: when this is its last
    // stage); its leaf index within the subtree says its level.
    if (walk.ends_class(s)) gemm::push_leaf_at(__ffs(~walk.last_class(s)) - 1, acc, stack);
  };

  // At the top of iteration s this lane's copies of stage s have landed;
  // the warp barrier makes every lane's visible and says every lane is done
  // with stage s - 1, whose buffer then receives stage s + kRing - 1.
  if (active) {
    for (int s = 0; s < split_stages; ++s) {
      cp_async_wait<kRing - 2>();
      __syncwarp();
      issue(s + kRing - 1);
      compute_stage(s);
    }
  }
  cp_async_wait<0>();
  // The subtree's total: its last leaf merged every level below kTopLevel.
  float total[2];
#pragma unroll
  for (int j = 0; j < 2; ++j) total[j] = kTopLevel == 5 ? acc[j] : stack[kTopLevel < 5 ? kTopLevel : 0][j];

  float* join = reinterpret_cast<float*>(smem + n_stages * kActStageBytes);
  mma_decode::join_and_store<kRows, kSplit, kEpilogue>(total, join, me, bt, epilogue, angle);
}

// The fewest rows of a decode group that take the tensor cores by default.
// Session 16 (H100, same call, llama3-8b Q4_0 / smollm2-135m Q4_0, 4 rows):
// 1,375.4 / 5,720.2 tok/s against 1,341.4 / 4,879.6 on the dp4a kernels;
// 2 rows (half the lanes idle, the same MMAs) 668.9 against 814.5.
constexpr size_t kDefaultMinRows = 3;
// Matrices of more than kMidLow and fewer than kMidHigh weights (n_out x k
// of a launch's targets together: llama3-8b's o and q/k/v) that
// MUSER_CUDA_DECODE_MMA_MID=0 keeps on the dp4a kernels.
constexpr size_t kMidLow = size_t{4} << 20, kMidHigh = size_t{32} << 20;

// MUSER_CUDA_DECODE_MMA: "0" keeps every decode group on the dp4a kernels,
// "2" / "3" takes the tensor cores from 2 / 3 rows; unset, kDefaultMinRows
// (read once). A q/k/v launch with its RoPE + KV epilogue over mid-sized
// matrices (kMidLow, kMidHigh: llama3-8b's) stays on the dp4a kernel unless
// MUSER_CUDA_DECODE_MMA_ROPE=1, smaller ones take the tensor cores: at 4
// rows llama3-8b Q4_0 ran 1,425.8 and 1,430.1 tok/s with its q/k/v on dp4a
// against 1,395.9 on the tensor cores, and smollm2-135m Q4_0 5,508.5 and
// 5,489.5 against 5,753.0 (session 18, H100, one call). =0 keeps every
// q/k/v launch on dp4a, MUSER_CUDA_DECODE_MMA_MID=0 every mid-sized
// matrix; for A/B runs, the same bits.
size_t mma_min_rows() {
  static const size_t rows = env_is("MUSER_CUDA_DECODE_MMA", "0")   ? 5
                             : env_is("MUSER_CUDA_DECODE_MMA", "2") ? 2
                             : env_is("MUSER_CUDA_DECODE_MMA", "3") ? 3
                                                                    : kDefaultMinRows;
  return rows;
}

// Whether launches whose rows the blocks kernel reads go to it unless the
// environment says otherwise: no. It keeps the bits (tests/cuda passed on
// the H100) but loses: llama3-8b Q4_0 at 4 rows ran 1,152.9 tok/s on the
// blocks against 1,387.7 on the packed copy (session 18, H100, one call:
// benchmarks/device/cuda_decode_mma_blocks_check.sh); per layer gate/up
// took 46.0 against 31.6 us, o and ffn_down together 31.3 against 28.8 us,
// q/k/v 14.4 against 13.0 us (MUSER_CUDA_PDL=0 step profile). Reading 15%
// fewer bytes did not pay for its copy loop and its 4-way split of gate/up.
constexpr bool kBlocksByDefault = false;
// MUSER_CUDA_DECODE_MMA_BLOCKS=0 keeps the packed-copy kernel where the
// blocks kernel could read the weights, =1 takes the blocks kernel there
// (for A/B runs; the same bits). Read once.
bool blocks_enabled() {
  static const bool enabled = env_is("MUSER_CUDA_DECODE_MMA_BLOCKS", "1") ||
                              (kBlocksByDefault && !env_is("MUSER_CUDA_DECODE_MMA_BLOCKS", "0"));
  return enabled;
}

template <int kEpilogue>
bool launch_mma(DType type, const MatvecTarget* targets, size_t count, const ActivationView& x, size_t n_rows,
                int split, MmaWeights weights, const RopeKvTail* rope, void* stream_ptr) {
  if (type != DType::Q4_0 || x.format != ActivationFormat::Q8_0 || n_rows < 1 || n_rows > 4 || count < 1 ||
      count > kMaxDecodeTargets || x.k % 32 != 0) {
    return false;
  }
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  if (weights == MmaWeights::kBlocks || (weights == MmaWeights::kAny && blocks_enabled())) {
    if (mma_decode::launch_blocks(targets, count, x, n_rows, split, rope, stream)) return true;
    if (weights == MmaWeights::kBlocks) return false;
  }
  size_t tiles16 = 0;
  for (size_t p = 0; p < count; ++p) {
    if (targets[p].n_out != 0 && targets[p].w_packed == nullptr) return false;
    tiles16 += (targets[p].n_out + 15) / 16;
  }
  if (tiles16 == 0) return true;
  const DecodeEpilogue epilogue = rope != nullptr ? rope_kv_epilogue(*rope) : DecodeEpilogue{};
  bool launched = false;
  gemm::with_walk(x.k, [&]<int kP>(int stages_per_class) {
    const int n_stages = Walk<kP>{stages_per_class}.n_stages();
    const size_t smem = static_cast<size_t>(n_stages) * kActStageBytes + kJoinBytes + kWarps * kRingBytes;
    if (smem > shared_memory_per_block_optin()) return;
    // Subtrees of whole stages (kP < 8: at most 4 kP, whole classes a stage).
    const int s = split != 0 ? split
                             : mma_decode::pick_split(tiles16, mma_decode::blocks_per_sm(smem), [&](int cut) {
                                 return n_stages % cut == 0 && (kP == 8 || cut <= 4 * kP);
                               });
    if ((s != 1 && s != 2 && s != 4 && s != 8) || n_stages % s != 0 || (kP < 8 && s > 4 * kP)) {
      throw InvalidArgument("[cuda matvec] the tensor-core decode matvec cannot cut " + std::to_string(n_stages) +
                            " stages into " + std::to_string(s) + " subtrees");
    }
    auto launch = [&]<int kRows, int kSplit>() {
      unsigned blocks = 0;
      const DecodeTargets t = decode_targets(targets, count, 16 * (kWarps / kSplit), true, blocks);
      auto kernel = matvec_mma_kernel<kP, kRows, kSplit, kEpilogue>;
      // Once per kernel: any launch's shared memory may reach the device's
      // limit (checked above), so no later call (a graph capture) sets it.
      static const cudaError_t opted_in = cudaFuncSetAttribute(
          kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared_memory_per_block_optin()));
      check_cuda(opted_in, "cudaFuncSetAttribute(matvec_mma)");
      launch_dependent(kernel, blocks, kWarps * 32, smem, stream, t, stages_per_class, static_cast<int>(x.k / 32), x,
                       epilogue);
      check_launch("matvec (decode, tensor cores)");
    };
    auto with_split = [&]<int kRows>() {
      switch (s) {
        case 1: launch.template operator()<kRows, 1>(); break;
        case 2: launch.template operator()<kRows, 2>(); break;
        case 4: launch.template operator()<kRows, 4>(); break;
        default: launch.template operator()<kRows, 8>(); break;
      }
    };
    switch (n_rows) {
      case 1: with_split.template operator()<1>(); break;
      case 2: with_split.template operator()<2>(); break;
      case 3: with_split.template operator()<3>(); break;
      default: with_split.template operator()<4>(); break;
    }
    launched = true;
  });
  return launched;
}

}  // namespace

bool matvec_decode_mma(DType type, const MatvecTarget* targets, size_t count, const ActivationView& x, size_t n_rows,
                       int split, MmaWeights weights, void* stream) {
  return launch_mma<kEpilogueNone>(type, targets, count, x, n_rows, split, weights, nullptr, stream);
}

bool matvec_rope_kv_mma(DType type, const MatvecTarget* qkv, const ActivationView& x, size_t n_rows,
                        const RopeKvTail& tail, void* stream) {
  return launch_mma<kEpilogueRopeKv>(type, qkv, 3, x, n_rows, 0, MmaWeights::kAny, &tail, stream);
}

bool decode_takes_mma(DType type, size_t n_rows, size_t weights, bool rope) {
  static const bool mid = !env_is("MUSER_CUDA_DECODE_MMA_MID", "0");
  static const int rope_mma = env_is("MUSER_CUDA_DECODE_MMA_ROPE", "1")   ? 1
                              : env_is("MUSER_CUDA_DECODE_MMA_ROPE", "0") ? 0
                                                                          : -1;  // unset: small ones
  if (type != DType::Q4_0 || n_rows < mma_min_rows() || n_rows > 4) return false;
  const bool mid_sized = weights > kMidLow && weights < kMidHigh;
  if (rope && (rope_mma == 0 || (rope_mma < 0 && mid_sized))) return false;
  return mid || !mid_sized;
}

}  // namespace muser::cuda
