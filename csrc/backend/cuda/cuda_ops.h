// Host-side launchers of the CUDA backend's kernels: the op set on device
// buffers. Plain C++ (no CUDA headers), so the backend, the test entry points
// and the benchmarks include it from ordinary .cpp files.
//
// Conventions: every pointer is device memory; row-major float32 rows unless
// said otherwise; every launcher enqueues on `stream` (a cudaStream_t passed
// as void*) and returns without waiting. Launch failures throw through
// check_cuda (cuda_error.h).
//
// Exactness: each kernel computes a row from that row's inputs alone, with a
// reduction order fixed by the row's length (never by how many rows are in
// the launch or where the row sits among them). So a row's bits are the same
// alone, in any group of rows and in any prefill chunking, and every run is
// deterministic.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tensor/dtype.h"
#include "tensor/reference_kernels.h"

namespace muser::cuda {

// Rows one matvec launch tile carries: decode groups use 1..4, prefill
// segments walk their rows in tiles of kPrefillTileRows.
constexpr int kPrefillTileRows = 8;

// An activation matrix (n_rows, k) prepared for weights of one type: int8
// quants with per-block scales, or the float rows themselves for F32/F16/BF16
// weights. Laid out for aligned loads on the device (the bytes differ from
// BlockQ8_*, the values are the same as ref::quantize_row_*):
//   q     int8  (n_rows, k)
//   d     float (n_rows, k / block): the block scale (Q8_0/Q8_1: the fp16 d
//         widened; Q8_K: the fp32 d of each 256-element block)
//   s     float (n_rows, k / 32): Q8_1 only, fp16(d * sum(q)) widened
//   bsum  int32 (n_rows, k / 16): Q8_K only, sums of each 16 quants
//   f     float (n_rows, k): F32 only (points at the input rows)
//   gemm_pack  room for the packed GEMM's walk-ordered copy of q and the
//         scales (gemm_activation_pack_bytes; Q8_0 and Q8_K views of
//         kGemmMinRows rows or more, and only while gemm_packs(Q4_0),
//         gemm_packs(Q4_K)), written by gemm_mma itself
struct ActivationView {
  ActivationFormat format = ActivationFormat::F32;
  size_t k = 0;
  const int8_t* q = nullptr;
  const float* d = nullptr;
  const float* s = nullptr;
  const int32_t* bsum = nullptr;
  const float* f = nullptr;
  void* gemm_pack = nullptr;
};

// Device bytes an ActivationView of n_rows x k takes (F32 needs none).
size_t activation_bytes(ActivationFormat format, size_t n_rows, size_t k);

// The view of an (n_rows, k) activation of `format` laid out in `scratch`
// (pointers only; F32 leaves f null).
ActivationView activation_view(ActivationFormat format, size_t n_rows, size_t k, void* scratch);

// Quantizes x (n_rows, k) into `scratch` (activation_bytes of room) and
// returns the view. F32 returns a view of x itself. Bitwise the values of
// ref::quantize_row_*.
ActivationView quantize_activations(ActivationFormat format, const float* x, size_t n_rows, size_t k,
                                    void* scratch, void* stream);

// y (n_rows, ld_y) columns [0, n_out) = x (n_rows, k) times the weight
// matrix w (n_out rows of k elements of `type`, GGUF row layout). x is in
// activation_format(type).
// w_packed: gemm_pack_weights' copy of w, which the GEMM reads where given
// (null: the GEMM reads w).
void matvec(DType type, const void* w, size_t n_out, const ActivationView& x, size_t n_rows, float* y,
            size_t ld_y, void* stream, const void* w_packed = nullptr);

// How the decode matvec (1..4 rows, ops_matvec_decode.cu) lays out one
// launch: each warp computes `warp_rows` consecutive weight rows for every
// row of the group, each lane loading `unroll` units of each of them before
// using any; `wide` lets Q4_0 and Q4_K rows that start 16-byte aligned load
// their units in aligned 16-byte words. Every config gives each output the
// same bits as matvec's prefill tiles (configs differ only in speed).
// Configs that exist: warp_rows 1 with unroll 1, 2 or 4 with unroll 1 or 2
// (float weights run every config but 1 x 1 as 2 x 1: their units are 32
// registers each).
// lane_rows 8 (with warp_rows 1, unroll 1 or 2) spreads each warp's
// lanes over that many weight rows instead (ops_matvec_spread.cu): the
// lanes of one row's unit strides sit in different warps of a block, and
// the lanes that read the same activations share their loads.
struct DecodeConfig {
  int warp_rows = 1;
  int unroll = 1;
  bool wide = false;
  int lane_rows = 1;
};
bool decode_config_exists(const DecodeConfig& config);

// The config matvec uses for weights of `type`, n_rows (1..4) rows and
// n_out weight rows (all targets' together for matvec_targets). spread:
// whether lane_rows > 1 may be picked (the fused launches take only
// lane_rows 1). MUSER_CUDA_DECODE=classic rules spread configs out.
DecodeConfig decode_config(DType type, size_t n_out, size_t n_rows, bool spread = true);

// One matrix of a matvec_targets call: y (n_rows, ld_y) columns [0, n_out)
// = x times w (n_out rows, GGUF layout).
struct MatvecTarget {
  const void* w = nullptr;
  size_t n_out = 0;
  float* y = nullptr;
  size_t ld_y = 0;
  const void* w_packed = nullptr;  // gemm_pack_weights' copy of w, or null
};
constexpr size_t kMaxDecodeTargets = 3;

// matvec for `count` (1..kMaxDecodeTargets) matrices of one type that read
// the same x (a layer's q, k and v; gate and up): 1..4 rows run as one
// decode launch over all of them (small matrices such as k and v fill the
// GPU only together), kGemmMinRows rows and more as one packed GEMM launch
// where every target has a packed copy (gemm_mma_targets), other row counts
// as one matvec per target. Each output's bits are those matvec gives it
// alone.
void matvec_targets(DType type, const MatvecTarget* targets, size_t count, const ActivationView& x, size_t n_rows,
                    void* stream);

// The decode launch of matvec_targets (1..4 rows) with an explicit config
// (matvec picks decode_config's); x as matvec checks it. Throws
// InvalidArgument for a config that does not exist.
void matvec_decode(DType type, const MatvecTarget* targets, size_t count, const ActivationView& x, size_t n_rows,
                   const DecodeConfig& config, void* stream);
// Which weights the tensor-core decode matvec reads: kAny as the engine
// does (the GGUF blocks where their kernel can, ops_matvec_decode_mma_blocks.cu:
// rows of a multiple of 8 blocks, if MUSER_CUDA_DECODE_MMA_BLOCKS=1 asks:
// by default it does not, the blocks kernel measured slower; else the
// packed GEMM copy,
// ops_matvec_decode_mma.cu), or only the one named.
enum class MmaWeights { kAny, kBlocks, kPacked };
// The decode matvec on the tensor cores: Q4_0 weights, Q8_0 activations,
// 1..4 rows; every output bitwise what matvec_decode gives it. split: the
// subtrees a 16-output tile's 32 classes are cut into (the packed kernel
// 1, 2, 4, 8, the blocks kernel 4, 8; 0: picked from the launch's size).
// Returns false (nothing enqueued) where it does not take the call (the
// packed kernel: a target without w_packed; the blocks kernel: rows it
// cannot read); throws InvalidArgument for a split it cannot cut into.
bool matvec_decode_mma(DType type, const MatvecTarget* targets, size_t count, const ActivationView& x, size_t n_rows,
                       int split, MmaWeights weights, void* stream);
// Whether a decode launch of n_rows rows over `weights` weights (n_out x k
// of its targets together) of `type` goes to the tensor cores first
// (matvec_decode_mma; rope: matvec_rope_kv_mma): Q4_0 at 3..4 rows
// (ops_matvec_decode_mma.cu says which environment switches change that).
bool decode_takes_mma(DType type, size_t n_rows, size_t weights, bool rope);
// A decode group's matvec: matvec_decode_mma where decode_takes_mma and it
// takes the call, else matvec_decode with decode_config's config.
void matvec_decode_group(DType type, const MatvecTarget* targets, size_t count, const ActivationView& x,
                         size_t n_rows, void* stream);
// matvec_decode's launch for configs with lane_rows 8 (checked there).
void matvec_decode_spread(DType type, const MatvecTarget* targets, size_t count, const ActivationView& x,
                          size_t n_rows, const DecodeConfig& config, void* stream);

// out (n, width) = rms_norm of each row of x times weight (width floats;
// null: no weight). `out` may equal x. A row may be a head: n = rows * heads,
// width = head_dim.
void rms_norm(const float* x, const float* weight, size_t n, size_t width, float eps, float* out, void* stream);

// rms_norm that also quantizes its output rows for the matvec that reads
// them: out as rms_norm writes it, and the Q8_0 / Q8_1 view of out in
// `scratch` (activation_bytes of room) bit for bit what
// quantize_activations(format, out, ...) writes. width % 32 == 0. out null:
// the view alone (when nothing reads the floats).
ActivationView rms_norm_quantized(const float* x, const float* weight, size_t n, size_t width, float eps, float* out,
                                  ActivationFormat format, void* scratch, void* stream);

// The residual add before a norm, in one launch: sum_out (n, width) =
// a + b (the bits add writes; sum_out may be a), then out = rms_norm of
// sum_out as rms_norm writes it, and with format Q8_0 / Q8_1 (width % 32 ==
// 0) its view quantized in `scratch` as rms_norm_quantized does (F32: none;
// out may then be null, as for rms_norm_quantized).
ActivationView add_rms_norm(float* sum_out, const float* a, const float* b, const float* weight, size_t n,
                            size_t width, float eps, float* out, ActivationFormat format, void* scratch,
                            void* stream);

// dst (n, width) = a (n, width) + b (b_row_stride 0: the same vector for
// every row). dst may be a.
void add(float* dst, const float* a, const float* b, size_t n, size_t width, size_t b_row_stride, void* stream);
// dst (count) = src * factor. dst may be src.
void scale(float* dst, const float* src, size_t count, float factor, void* stream);
// dst (count) = cap * tanh(src / cap). dst may be src.
void softcap(float* dst, const float* src, size_t count, float cap, void* stream);

enum class Glu : int { Silu = 0, GeluTanh = 1 };
// dst (count) = act(gate) * up. dst may be gate.
void glu(Glu kind, float* dst, const float* gate, const float* up, size_t count, void* stream);

// glu that also quantizes its output rows (n_rows, width) for the matvec
// that reads them, as rms_norm_quantized does (dst null: the view alone).
// width % 32 == 0.
ActivationView glu_quantized(Glu kind, float* dst, const float* gate, const float* up, size_t n_rows, size_t width,
                             ActivationFormat format, void* scratch, void* stream);

// dst (n, dst_cols) = src (n, src_cols) columns [offset, offset + dst_cols).
void slice_cols(float* dst, const float* src, size_t n, size_t src_cols, size_t offset, size_t dst_cols,
                void* stream);

// Rotates the first n_rot dims of each head of x (n_rows, n_heads * head_dim)
// by angles positions[r] * position_scale * inv_freq[i] (inv_freq: n_rot/2
// doubles on the device). neox: pairs (i, i + n_rot/2), else (2i, 2i+1).
void rope(float* x, size_t n_rows, size_t n_heads, size_t head_dim, size_t n_rot, bool neox,
          const int32_t* positions, const double* inv_freq, double position_scale, void* stream);

// rope of a (n_rows, n_heads_a * head_dim) and b (n_rows, n_heads_b *
// head_dim) at the same positions and frequencies in one launch (a layer's
// q and k), each element bitwise what rope writes.
void rope_pair(float* a, size_t n_heads_a, float* b, size_t n_heads_b, size_t n_rows, size_t head_dim, size_t n_rot,
               bool neox, const int32_t* positions, const double* inv_freq, double position_scale, void* stream);

// out (n_rows, k) = rows ids[r] of the matrix w (rows of k elements of
// `type`), dequantized; bitwise ref::dequantize_row.
void get_rows(DType type, const void* w, size_t k, const int32_t* ids, size_t n_rows, float* out, void* stream);

// out (n, width) = rows ids[i] of x (rows of width floats).
void gather_rows(const float* x, size_t width, const int32_t* ids, size_t n, float* out, void* stream);

// Where each row of a forward writes and reads its keys and values. Per-row
// tables live on the device so one recorded launch serves every step.
struct KvRows {
  // (n_rows) pointer to the row's session table of 2 * n_layer plane
  // pointers: K planes of layers 0..n_layer-1, then V planes (f16).
  const uint16_t* const* const* tables = nullptr;
  const int32_t* positions = nullptr;   // (n_rows) the row's position
  const int32_t* ring_rows = nullptr;   // (n_rows) ring size of its session (0: no ring)
  const int32_t* writes = nullptr;      // (n_rows) 1: write the row's K/V, 0: replay
  // (n_rows) the positions again, on the host, for launches enqueued outside
  // a graph capture: attention then launches only the splits some row of a
  // tile uses. Null (a capture replays at other positions): every split.
  const int32_t* host_positions = nullptr;
};

// Converts the row's k (n_rows, k_width) and v to f16 and stores them at the
// row's position in layer `layer` (ring layers at position % ring_rows).
void write_kv(const KvRows& kv, uint32_t n_layer, uint32_t layer, bool ring, const float* k, size_t k_width,
              const float* v, size_t v_width, size_t n_rows, void* stream);

// rope_pair of a layer's q (a) and k (b), then write_kv of the rotated k and
// of v (n_rows, v_width) into layer `layer`, in one launch: the same bits
// as rope_pair followed by write_kv (b's rows are the keys, k_width =
// n_heads_b * head_dim).
void rope_pair_kv(float* a, size_t n_heads_a, float* b, size_t n_heads_b, size_t n_rows, size_t head_dim,
                  size_t n_rot, bool neox, const int32_t* positions, const double* inv_freq, double position_scale,
                  const KvRows& kv, uint32_t n_layer, uint32_t layer, bool ring, const float* v, size_t v_width,
                  void* stream);

// out (n_rows, n_head * head_dim_v) = softmax(q.K * scale) V for every query
// head over the row's visible positions [max(0, pos - window + 1), pos]
// (window 0: all), with K/V read from the f16 planes of layer `layer`.
struct AttentionShape {
  uint32_t n_layer = 0, layer = 0;
  bool ring = false;
  size_t n_head = 0, n_head_kv = 0, head_dim_k = 0, head_dim_v = 0;
  size_t window = 0;
  float scale = 1.0f;
};
// `scratch`: attention_scratch_bytes(shape, n_rows) of device memory for
// the per-split partials and the counters (per (row, head) in the scalar
// kernels, per (tile, KV head) on the tensor cores), for the rows of one
// launch (at most a step's 512), so a longer call reuses them. The counters must be zero before the first call: clear a new
// scratch once with clear_attention_scratch; every call leaves them zero.
size_t attention_scratch_bytes(const AttentionShape& shape, size_t n_rows);
void clear_attention_scratch(void* scratch, size_t bytes, void* stream);
// Which kernel runs it: the decode kernel (attention_partial_kernel: one
// block per (row, query head, split)), the prefill kernel (a block stages
// each K/V position once for several rows and the query heads of a KV head;
// at most 16 query heads per KV head, and a staging within the GPU's shared
// memory per block), or Auto: prefill from 5 rows on when it takes the
// layout. Every row's result is bitwise the same from both;
// the choice is for speed (and tests). prefill_warps: warps per block of the
// prefill kernel (1..16, 0: its default of 8), for benchmarks and tests;
// the bits do not depend on it either.
enum class AttentionKernel { Auto, Decode, Prefill };
// Whether attention of `shape` runs on the tensor cores (attention_mma.cu:
// heads of 64 or 128 dimensions, K and V alike, and up to 16 query heads
// per KV head, unless MUSER_CUDA_ATTENTION_MMA=0). Its one kernel serves
// every row count (`kernel` only chooses how rows share its tiles, and
// prefill_warps is not used); other shapes take the scalar kernels above.
bool attention_mma_applies(const AttentionShape& shape);
void attention(const KvRows& kv, const AttentionShape& shape, const float* q, size_t n_rows, float* out,
               void* scratch, void* stream, AttentionKernel kernel = AttentionKernel::Auto, int prefill_warps = 0);
// For a captured decode step, whose attention launches take every split
// (KvRows::host_positions is null under capture): the positions per chunk
// of `kernel` if it is the decode attention kernel (so a launch of it can be
// refitted to a replay's positions), else 0; and the splits a launch over
// rows at `positions` needs with chunks of `chunk` positions (the grid a
// launch with host positions gets). Split z's work never depends on the grid.
int attention_decode_chunk(const void* kernel);
unsigned attention_splits(const int32_t* positions, size_t n_rows, int chunk);
// attention that also quantizes its output rows for the matvec that reads
// them, as rms_norm_quantized does (Q8_0 / Q8_1, head_dim_v % 32 == 0):
// one launch instead of attention's and the quantization's.
ActivationView attention_quantized(const KvRows& kv, const AttentionShape& shape, const float* q, size_t n_rows,
                                   float* out, void* scratch, ActivationFormat format, void* q_scratch,
                                   void* stream, AttentionKernel kernel = AttentionKernel::Auto,
                                   int prefill_warps = 0);

// Decode launches (1..4 rows) that also run the op after the matvec in
// their epilogue (ops_matvec_fused.cu): one launch fewer per layer each, for
// the weight types fused_decode_type names. Every value they write is
// bitwise what the separate launches write.
bool fused_decode_type(DType type);

// The RoPE and KV store after a layer's q/k/v matvec.
struct RopeKvTail {
  size_t head_dim = 0, n_rot = 0;  // n_rot even, <= head_dim
  const int32_t* positions = nullptr;
  const double* inv_freq = nullptr;
  double position_scale = 1.0;
  KvRows kv;
  uint32_t n_layer = 0, layer = 0;
  bool ring = false;
};
// Whether matvec_rope_kv takes these: normal-style RoPE (neox false), an
// even n_rot <= head_dim, q/k/v of one fused type with whole heads.
bool matvec_rope_kv_fits(DType type, size_t q_out, size_t k_out, size_t head_dim, size_t n_rot, bool neox,
                         size_t n_rows);
// matvec_targets of q, k, v (qkv[0..2]) then rope_pair_kv of q (a) and k (b)
// with v, in one launch: the same bits in q, k, v and the KV planes.
void matvec_rope_kv(DType type, const MatvecTarget* qkv, const ActivationView& x, size_t n_rows,
                    const RopeKvTail& tail, void* stream);
// matvec_rope_kv on the tensor cores (matvec_decode_mma's conditions and
// matvec_rope_kv's), which matvec_rope_kv calls where decode_takes_mma: the
// same bits; false where it does not take the call.
bool matvec_rope_kv_mma(DType type, const MatvecTarget* qkv, const ActivationView& x, size_t n_rows,
                        const RopeKvTail& tail, void* stream);

// Counters matvec_glu_quantized needs for a width (zeroed once, e.g. with
// cudaMemset; every launch leaves them zero).
size_t glu_counter_count(size_t width);
// Whether matvec_glu_quantized takes these: gate and up of one fused type
// and width, a multiple of 32; Q8_0 / Q8_1 output.
bool matvec_glu_fits(DType type, size_t gate_out, size_t up_out, ActivationFormat format, size_t n_rows);
// matvec_targets of gate, up (gate_up[0..1]) then glu_quantized(kind, dst,
// gate, up) in one launch: the same bits in gate, up, dst and the view in
// `scratch`, which it returns. dst (n_rows, width) may be gate's output.
ActivationView matvec_glu_quantized(DType type, const MatvecTarget* gate_up, const ActivationView& x, size_t n_rows,
                                    Glu kind, float* dst, ActivationFormat format, void* scratch, unsigned* counters,
                                    void* stream);

// The tensor-core GEMM of prefill (ops_gemm_mma.cu). matvec hands calls of
// kGemmMinRows rows or more to gemm_mma, which takes Q4_0, Q4_1, Q5_0, Q5_1,
// Q8_0 and Q4_K weights; other types and refused matrices run matvec's tiles of
// kPrefillTileRows. Both give a row the same bits.
//
// Rows from which matvec takes the GEMM. A launch of up to 64 rows costs
// the GEMM about the same (one row tile; on the H200 about 24 ms over
// llama3-8b's 32 layers of Q4_0 matrices), the tiles one pass over the
// weights per 8 rows (about 4.7 ms each): the tiles are faster up to 5
// passes (40 rows), the GEMM from 41 rows on (and 3.5x at 512 rows).
constexpr size_t kGemmMinRows = 41;

// Weight types with an int8 tensor-core GEMM (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K).
bool has_gemm_mma(DType type);

// What matvec computes, on the tensor cores: every output bitwise the matvec
// kernel's for the same row, at any n_rows. Launches and returns true for
// types with has_gemm_mma whose weights start and end 4-byte aligned and
// whose activation quants are 16-byte aligned; false (nothing enqueued)
// otherwise.
// With w_packed (gemm_pack_weights' copy of w) and x.gemm_pack, the packed
// version runs (ops_gemm_mma_packed.cu): it first writes x's walk-ordered
// copy into x.gemm_pack, then reads only the packed operands.
bool gemm_mma(DType type, const void* w, size_t n_out, const ActivationView& x, size_t n_rows, float* y,
              size_t ld_y, void* stream, const void* w_packed = nullptr);

// gemm_mma for `count` (1..kMaxDecodeTargets) matrices that read the same x
// (a layer's q, k and v; gate and up) as one packed launch, x packed once:
// k and v alone are about one short wave of blocks each. Launches and
// returns true when every target takes the packed version (each w_packed
// set, x.gemm_pack set, gemm_packs(type), gemm_mma's alignment); false
// (nothing enqueued) otherwise. Each output's bits are gemm_mma's.
bool gemm_mma_targets(DType type, const MatvecTarget* targets, size_t count, const ActivationView& x, size_t n_rows,
                      void* stream);

// The packed GEMM (the default for Q4_0 and Q4_K; MUSER_CUDA_GEMM=v1, read
// once, turns it off): whether gemm_mma reads weights of `type` from a
// packed copy. The copy holds each 64-output tile's stages as contiguous
// 10 KiB chunks (Q4_K: 12 KiB) in the walk's order (the quants' nibble
// words ordered as the MMA's lanes read them, the scales widened to float),
// so that every stage is a few contiguous 16-byte copies. It costs 20 bytes
// per 32 weights (Q4_K 24; more where the walk pads a row: k = 14336 walks
// 512 units for 448) beside the 18 of the GGUF blocks (Q4_K 18), which the
// decode matvec keeps reading: llama3-8b's 32 layers 4.53 GB beside 3.93 GB
// of blocks.
bool gemm_packs(DType type);
// Bytes of the packed copy of an (n_out, k) matrix (0 unless gemm_packs).
size_t gemm_packed_weight_bytes(DType type, size_t n_out, size_t k);
// Writes the packed copy of w (n_out rows of k elements, GGUF layout) into
// dst (gemm_packed_weight_bytes of room, 16-byte aligned).
void gemm_pack_weights(DType type, const void* w, size_t n_out, size_t k, void* dst, void* stream);
// Bytes of an ActivationView's gemm_pack room for n_rows x k (0 below
// kGemmMinRows rows or unless gemm_packs of the type the format feeds:
// Q4_0 for Q8_0, Q4_K for Q8_K).
size_t gemm_activation_pack_bytes(ActivationFormat format, size_t n_rows, size_t k);

}  // namespace muser::cuda
