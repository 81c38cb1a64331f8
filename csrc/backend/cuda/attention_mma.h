// The tensor-core attention (attention_mma.cu): the shapes it takes and its
// launches, for ops_attention.cu's entry points, which own the scratch and
// fall back to the scalar kernels for other shapes.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "backend/cuda/attention_parts.cuh"
#include "backend/cuda/cuda_ops.h"

namespace muser::cuda {

// The positions per chunk of `kernel` if it is a tensor-core attention
// kernel (a captured decode launch refits its splits with them), else 0.
int attention_mma_chunk(const void* kernel);

// Attention of n_rows rows in launches of at most `launch_rows`, over the
// scratch's counters (`done`, zero before, zero after) and partials (from
// `part_ms`). rows_together: the rows may share tiles (a prefill segment's
// rows); else a tile per row (decode groups). The bits are the same either way.
void attention_mma(const KvRows& kv, const AttentionShape& shape, const float* q, size_t n_rows, float* out,
                   unsigned* done, float* part_ms, size_t launch_rows, const attention_parts::QuantizedOut& qo,
                   bool rows_together, bool prefetch, cudaStream_t stream);

}  // namespace muser::cuda
