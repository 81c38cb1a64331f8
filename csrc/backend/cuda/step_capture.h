// A decode step captured as a CUDA graph and instantiated, owned (RAII):
// what CudaBackend replays for each decode group of a shape class.
//
// Its attention launches were recorded with every split (kSplits blocks per
// row and head): under capture the positions are unknown, and the replays
// run at other ones. Blocks of splits no row reaches exit at once, but each
// still takes a block slot and a read of the positions; at 4 rows of
// llama3-8b at ~150 positions that is 13 of every 16 blocks. So before each
// replay fit_attention_grids gives each attention launch the splits the
// step's rows reach (attention_splits, the grid an uncaptured launch gets),
// updating the launch in the instantiated graph only when that changes
// (every `chunk` positions, up to kSplits). Split z's work does not depend on
// the grid, so the bits are the same. On the H200 (session 10, llama3-8b
// Q4_0, 4 rows at ~150 positions, dependent launch off) the attention took
// 9.2 us per layer instead of 12.4; with dependent launch on (the default),
// where the empty blocks exit while the kernel before still runs, the step
// rate stayed within noise for llama3-8b (1,272 / 1,281 against 1,291
// tok/s) and rose 3% for smollm2-135m at 4 rows (4,401 / 4,471 against
// 4,276). MUSER_CUDA_ATTENTION_GRID=full keeps every split.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace muser::cuda {

class StepCapture {
 public:
  // Takes ownership of `graph` (a cudaGraph_t just captured) and
  // instantiates it; fit_grids false keeps every launch as captured
  // (MUSER_CUDA_ATTENTION_GRID=full, for A/B runs).
  StepCapture(void* graph, bool fit_grids);
  ~StepCapture();
  StepCapture(const StepCapture&) = delete;
  StepCapture& operator=(const StepCapture&) = delete;

  // Sets each attention launch's grid for rows at `positions` (n_rows).
  void fit_attention_grids(const int32_t* positions, size_t n_rows);
  void launch(void* stream);

 private:
  struct AttentionLaunch {
    void* node;       // cudaGraphNode_t in graph_
    int chunk;        // positions per chunk of its kernel
    unsigned splits;  // its grid's x now
  };
  void* graph_ = nullptr;  // cudaGraph_t
  void* exec_ = nullptr;   // cudaGraphExec_t
  std::vector<AttentionLaunch> attention_;
};

}  // namespace muser::cuda
