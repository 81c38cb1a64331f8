// The op set: everything a step graph asks a backend to compute. The exact
// semantics (shapes, arithmetic order, exactness rules) are in
// notes/opset.md and docs/architecture.md; this header is their summary.
//
// Conventions: activations are float32 (rows, cols) row-major; "row r" of a
// step is one token of one sequence. Every op except Attention computes each
// row from the same row of its inputs only; Attention reads the row's own
// sequence's KV. No op's result for a row may depend on the other rows of the
// step (batch invariance), so a backend may split rows, heads and output
// columns among threads or blocks but never a reduction.
#pragma once

#include <cstddef>
#include <cstdint>

#include "graph/tensor.h"

namespace muser {

enum class OpKind : uint8_t {
  // dst(r, :) = src0[ids[r], :], ids = src1 (an Input). src0 is a Weight
  // matrix (the row is dequantized to float32) or an Activation (copied).
  GetRows,
  // dst(r, o) = sum_i W[o, i] * x(r, i); src0 = W (2-D Weight, any type),
  // src1 = x (rows, W.ne[0]), dst (rows, W.ne[1]). Quantized W: x is first
  // quantized per row to the type's activation format (as ggml does).
  MatMul,
  // Per group of `group` consecutive columns g of each row:
  //   dst = (x * (1 / sqrt(mean(x_g^2) + eps))) * w    (w = src1, `group` floats)
  // The sum of squares is accumulated in double, in index order; mean and
  // scale are float32. dst may be src0.
  RmsNorm,
  // dst = src0 + src1. src1 is (rows, cols) like src0, or a Weight vector of
  // `cols` values added to every row. dst may be src0.
  Add,
  // dst = src0 * scalar. dst may be src0.
  Scale,
  // Rotary embedding of the first n_rot dimensions of each of n_heads heads
  // (head_dim apart) of src0 at each row's position (src1, an Input);
  // src2 = per-pair frequency divisors (Weight, n_rot/2) or kNoTensor.
  // theta_i = (pos * freq_scale) * base^(-2i/n_rot) / divisor_i, in double;
  // cos/sin in double, rounded to float32; Normal pairs (2i, 2i+1), Neox
  // pairs (i, i + n_rot/2): a' = a*cos - b*sin, b' = a*sin + b*cos (float32).
  // dst may be src0.
  Rope,
  // dst = act(src0) * src1, act = silu (x / (1 + exp(-x))) or gelu_tanh.
  // dst may be src0.
  Glu,
  // dst = cap * tanh(src0 / cap). dst may be src0.
  Softcap,
  // dst(r, :) = src0(r, offset : offset + dst.cols).
  SliceCols,
  // Writes row r of src0 (keys) and src1 (values), rounded to float16, into
  // layer `layer` of the KV of row r's sequence at row r's position, for every
  // row whose sequence is written in this step (StepInputs::slot_writes).
  // No dst. Later ops of the step read these f16 values (a row attends to the
  // same bits a later decode will).
  KvStore,
  // Scaled dot-product attention of query row r (src0: n_head heads of
  // head_dim_k) over layer `layer` of its sequence's KV, positions
  // [max(0, pos + 1 - window), pos] (window 0: [0, pos]); query head h reads
  // KV head h / (n_head / n_head_kv). dst: (rows, n_head * head_dim_v).
  // scores = scale * (q . k) (float32 dot of the f16 key as float32), softmax
  // with max subtraction, weights folded with 1/sum, weighted sum of values
  // in ascending position order.
  Attention,
};

enum class GluKind : uint8_t { Silu, GeluTanh };
enum class RopeStyle : uint8_t { Normal, Neox };

struct OpParams {
  float eps = 0.0f;        // RmsNorm
  size_t group = 0;        // RmsNorm: columns per normalized group (0 = whole row)
  float scalar = 1.0f;     // Scale: factor; Softcap: cap; Attention: score scale
  GluKind glu = GluKind::Silu;
  size_t offset = 0;       // SliceCols: first column
  // Rope
  RopeStyle rope_style = RopeStyle::Normal;
  double rope_base = 10000.0;
  double rope_freq_scale = 1.0;
  size_t n_rot = 0;
  // Rope and Attention
  size_t n_head = 0;
  size_t n_head_kv = 0;   // Attention
  size_t head_dim_k = 0;  // Rope: head_dim; Attention: query/key head width
  size_t head_dim_v = 0;  // Attention
  size_t window = 0;      // Attention: 0 = global
  uint32_t layer = 0;     // KvStore, Attention: KV layer
};

struct Op {
  explicit Op(OpKind k) : kind(k) {}
  OpKind kind;
  TensorId dst = kNoTensor;
  TensorId src[3] = {kNoTensor, kNoTensor, kNoTensor};
  OpParams p;
};

const char* op_name(OpKind kind);

}  // namespace muser
