// Stands in for csrc/backend/cuda/ in builds without a CUDA toolkit (CMake
// compiles exactly one of the two): the backend registry already reports
// "compiled without CUDA" for the name; here the CUDA test entry points say
// why they cannot run, so bindings and stubs are the same in every build.
#include <string>

#include "backend/cuda_testing.h"
#include "core/error.h"

namespace muser::cuda_testing {
namespace {

[[noreturn]] void unavailable(const char* what) {
  throw InvalidArgument(std::string("[cuda testing] ") + what +
                        ": compiled without CUDA (rebuild with a CUDA toolkit installed; MUSER_CUDA=ON)");
}

}  // namespace

std::vector<float> matvec(DType, const uint8_t*, size_t, size_t, const float*, size_t, int, int, bool, int) {
  unavailable("matvec");
}
std::vector<std::vector<float>> matvec_targets(DType, const std::vector<const uint8_t*>&, const std::vector<size_t>&,
                                               size_t, const float*, size_t) {
  unavailable("matvec_targets");
}
std::vector<float> matvec_mma(DType, const uint8_t*, size_t, size_t, const float*, size_t, int) {
  unavailable("matvec_mma");
}
double time_matvec(DType, const uint8_t*, size_t, size_t, const float*, size_t, int, int, bool, int, int) {
  unavailable("time_matvec");
}
QuantizedRows quantize(ActivationFormat, const float*, size_t, size_t) { unavailable("quantize"); }
std::vector<float> get_rows(DType, const uint8_t*, size_t, size_t, const std::vector<int32_t>&) {
  unavailable("get_rows");
}
std::vector<float> rms_norm(const float*, const float*, size_t, size_t, float) { unavailable("rms_norm"); }
NormQuantized rms_norm_quantized(ActivationFormat, const float*, const float*, size_t, size_t, float) {
  unavailable("rms_norm_quantized");
}
std::vector<float> glu(int, const float*, const float*, size_t) { unavailable("glu"); }
AddNormed add_rms_norm(ActivationFormat, const float*, const float*, const float*, size_t, size_t, float) {
  unavailable("add_rms_norm");
}
NormQuantized glu_quantized(ActivationFormat, int, const float*, const float*, size_t, size_t) {
  unavailable("glu_quantized");
}
std::vector<float> softcap(const float*, size_t, float) { unavailable("softcap"); }
RopeKvResult rope_pair_kv(const float*, size_t, const float*, size_t, const float*, size_t, size_t, size_t, size_t,
                          bool, const std::vector<int32_t>&, double, size_t, size_t, const std::vector<int32_t>&,
                          bool) {
  unavailable("rope_pair_kv");
}
std::vector<float> rope(const float*, size_t, size_t, size_t, size_t, bool, const std::vector<int32_t>&, double,
                        double, const std::vector<float>&) {
  unavailable("rope");
}
std::vector<float> rope_pair(const float*, size_t, const float*, size_t, size_t, size_t, size_t, bool,
                             const std::vector<int32_t>&, double) {
  unavailable("rope_pair");
}
std::vector<float> attention(const AttentionCase&) { unavailable("attention"); }
double attention_time_us(const AttentionCase&, int) { unavailable("attention_time_us"); }
void attention_on_shared_scratch(const AttentionCase&, const std::vector<size_t>&) {
  unavailable("attention_on_shared_scratch");
}
NormQuantized attention_quantized(const AttentionCase&, ActivationFormat) { unavailable("attention_quantized"); }
size_t device_free_bytes() { unavailable("device_free_bytes"); }
size_t shared_memory_per_block_optin() { unavailable("shared_memory_per_block_optin"); }
bool gemm_packs(DType) { unavailable("gemm_packs"); }
bool attention_uses_tensor_cores(size_t, size_t, size_t, size_t) { unavailable("attention_uses_tensor_cores"); }
DeviceMemoryHold::DeviceMemoryHold(size_t) { unavailable("DeviceMemoryHold"); }
void DeviceMemoryHold::release() noexcept {}

std::vector<float> matvec_groups(DType, const uint8_t*, size_t, size_t, const float*, size_t, size_t) {
  unavailable("matvec_groups");
}
std::vector<float> gemm_mma(DType, const uint8_t*, size_t, size_t, const float*, size_t, bool) {
  unavailable("gemm_mma");
}
double matvec_time_us(DType, const uint8_t*, size_t, size_t, const float*, size_t, size_t, int) {
  unavailable("matvec_time_us");
}

}  // namespace muser::cuda_testing
