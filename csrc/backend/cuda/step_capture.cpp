#include "backend/cuda/step_capture.h"

#include <cuda_runtime.h>

#include "backend/cuda/cuda_error.h"
#include "backend/cuda/cuda_ops.h"

namespace muser::cuda {

StepCapture::StepCapture(void* graph, bool fit_grids) : graph_(graph) {
  cudaGraph_t g = static_cast<cudaGraph_t>(graph_);
  cudaGraphExec_t exec = nullptr;
  const cudaError_t err = cudaGraphInstantiate(&exec, g, 0);
  if (err != cudaSuccess) {
    cudaGraphDestroy(g);
    check_cuda(err, "cudaGraphInstantiate");
  }
  exec_ = exec;
  if (!fit_grids) return;
  try {
    size_t n_nodes = 0;
    check_cuda(cudaGraphGetNodes(g, nullptr, &n_nodes), "cudaGraphGetNodes");
    std::vector<cudaGraphNode_t> nodes(n_nodes);
    check_cuda(cudaGraphGetNodes(g, nodes.data(), &n_nodes), "cudaGraphGetNodes");
    for (cudaGraphNode_t node : nodes) {
      cudaGraphNodeType type;
      check_cuda(cudaGraphNodeGetType(node, &type), "cudaGraphNodeGetType");
      if (type != cudaGraphNodeTypeKernel) continue;
      cudaKernelNodeParams params{};
      check_cuda(cudaGraphKernelNodeGetParams(node, &params), "cudaGraphKernelNodeGetParams");
      const int chunk = attention_decode_chunk(params.func);
      if (chunk > 0) attention_.push_back({node, chunk, params.gridDim.x});
    }
  } catch (...) {
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(g);
    throw;
  }
}

StepCapture::~StepCapture() {
  if (exec_ != nullptr) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
  if (graph_ != nullptr) cudaGraphDestroy(static_cast<cudaGraph_t>(graph_));
}

void StepCapture::fit_attention_grids(const int32_t* positions, size_t n_rows) {
  for (AttentionLaunch& a : attention_) {
    const unsigned splits = attention_splits(positions, n_rows, a.chunk);
    if (splits == a.splits) continue;
    cudaGraphNode_t node = static_cast<cudaGraphNode_t>(a.node);
    cudaKernelNodeParams params{};
    check_cuda(cudaGraphKernelNodeGetParams(node, &params), "cudaGraphKernelNodeGetParams");
    params.gridDim.x = splits;
    check_cuda(cudaGraphExecKernelNodeSetParams(static_cast<cudaGraphExec_t>(exec_), node, &params),
               "cudaGraphExecKernelNodeSetParams");
    a.splits = splits;
  }
}

void StepCapture::launch(void* stream) {
  check_cuda(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), static_cast<cudaStream_t>(stream)),
             "cudaGraphLaunch");
}

}  // namespace muser::cuda
