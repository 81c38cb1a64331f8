#include "backend/cuda_testing.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "backend/cuda/cuda_device.h"
#include "backend/cuda/cuda_error.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/device_buffer.h"
#include "core/error.h"

namespace muser::cuda_testing {
namespace {

using cuda::DeviceBuffer;

void require_device() {
  const std::string reason = cuda::probe_device();
  if (!reason.empty()) throw InvalidArgument("[cuda testing] " + reason);
}

// A private stream for one test call, destroyed on every path.
class Stream {
 public:
  Stream() { cuda::check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate"); }
  ~Stream() { cudaStreamDestroy(stream_); }
  void* get() const { return stream_; }
  void sync() const { cuda::check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }

 private:
  cudaStream_t stream_ = nullptr;
};

template <typename T>
DeviceBuffer upload(const T* data, size_t count, const char* what) {
  DeviceBuffer buf(count * sizeof(T), what);
  cuda::copy_to_device(buf.get(), data, count * sizeof(T), what);
  return buf;
}

template <typename T>
std::vector<T> download(const DeviceBuffer& buf, size_t count) {
  std::vector<T> out(count);
  if (count > 0) {
    cuda::check_cuda(cudaMemcpy(out.data(), buf.get(), count * sizeof(T), cudaMemcpyDeviceToHost), "download");
  }
  return out;
}

template <typename T>
std::vector<T> download_ptr(const T* ptr, size_t count) {
  std::vector<T> out(count);
  if (count > 0) {
    cuda::check_cuda(cudaMemcpy(out.data(), ptr, count * sizeof(T), cudaMemcpyDeviceToHost), "download");
  }
  return out;
}

}  // namespace

namespace {

// Checks a matvec call's shapes and config (see cuda_testing.h).
void check_matvec(DType type, size_t k, size_t n_rows, int warp_rows, int unroll, bool wide, int lane_rows) {
  require_device();
  const DTypeInfo& info = dtype_info(type);
  if (k == 0 || k % 32 != 0 || k % info.block_elems != 0) {
    throw InvalidArgument("[cuda testing] matvec row length must be a multiple of 32 and of the block size");
  }
  if (n_rows == 0) throw InvalidArgument("[cuda testing] matvec needs at least one row");
  if (warp_rows != 0) {
    if (n_rows > 4) throw InvalidArgument("[cuda testing] a decode kernel config needs 1..4 rows");
    if (!cuda::decode_config_exists({warp_rows, unroll, wide, lane_rows})) {
      throw InvalidArgument("[cuda testing] no decode kernel with warp_rows " + std::to_string(warp_rows) +
                            ", unroll " + std::to_string(unroll) + " and lane_rows " + std::to_string(lane_rows));
    }
  }
}

void launch_matvec(DType type, const void* w, size_t n_out, const cuda::ActivationView& x, size_t n_rows, float* y,
                   int warp_rows, int unroll, bool wide, int lane_rows, void* stream) {
  if (warp_rows == 0) {
    cuda::matvec(type, w, n_out, x, n_rows, y, n_out, stream);
  } else {
    const cuda::MatvecTarget target{w, n_out, y, n_out};
    cuda::matvec_decode(type, &target, 1, x, n_rows, {warp_rows, unroll, wide, lane_rows}, stream);
  }
}

// Two CUDA events, destroyed on every path.
struct EventPair {
  cudaEvent_t begin = nullptr, end = nullptr;
  EventPair() {
    cuda::check_cuda(cudaEventCreate(&begin), "cudaEventCreate");
    const cudaError_t err = cudaEventCreate(&end);
    if (err != cudaSuccess) {
      cudaEventDestroy(begin);
      cuda::check_cuda(err, "cudaEventCreate");
    }
  }
  ~EventPair() {
    cudaEventDestroy(begin);
    cudaEventDestroy(end);
  }
  EventPair(const EventPair&) = delete;
  EventPair& operator=(const EventPair&) = delete;
};

// n_out rows of `type` weights (GGUF row layout, k elements each) on the device.
DeviceBuffer upload_weights(DType type, const uint8_t* w, size_t n_out, size_t k) {
  return upload(w, row_bytes(type, k) * n_out, "weights");
}

// The GEMM's packed copy of uploaded weights w, as the backend makes it at
// upload; an empty buffer (get() null) for types it does not pack.
DeviceBuffer packed_copy(DType type, const DeviceBuffer& w, size_t n_out, size_t k, void* stream) {
  DeviceBuffer packed(cuda::gemm_packed_weight_bytes(type, n_out, k), "packed weights");
  if (packed.get() != nullptr) cuda::gemm_pack_weights(type, w.get(), n_out, k, packed.get(), stream);
  return packed;
}

// Activation rows x (n_rows, k) on the device, quantized in the format
// `type`'s matvec reads (the view points into `scratch`).
struct DeviceActivations {
  DeviceBuffer x, scratch;
  cuda::ActivationView view;
  DeviceActivations(DType type, const float* host_x, size_t n_rows, size_t k, void* stream)
      : x(upload(host_x, n_rows * k, "x")),
        scratch(cuda::activation_bytes(activation_format(type), n_rows, k), "activations"),
        view(cuda::quantize_activations(activation_format(type), x.as<float>(), n_rows, k, scratch.get(), stream)) {}
};

}  // namespace

std::vector<float> matvec(DType type, const uint8_t* w, size_t n_out, size_t k, const float* x, size_t n_rows,
                          int warp_rows, int unroll, bool wide, int lane_rows) {
  check_matvec(type, k, n_rows, warp_rows, unroll, wide, lane_rows);
  Stream stream;
  DeviceBuffer dw = upload_weights(type, w, n_out, k);
  DeviceBuffer dy(n_rows * n_out * sizeof(float), "y");
  const DeviceActivations act(type, x, n_rows, k, stream.get());
  launch_matvec(type, dw.get(), n_out, act.view, n_rows, dy.as<float>(), warp_rows, unroll, wide, lane_rows,
                stream.get());
  stream.sync();
  return download<float>(dy, n_rows * n_out);
}

std::vector<std::vector<float>> matvec_targets(DType type, const std::vector<const uint8_t*>& ws,
                                               const std::vector<size_t>& n_outs, size_t k, const float* x,
                                               size_t n_rows) {
  check_matvec(type, k, n_rows, 0, 0, true, 1);
  if (ws.size() != n_outs.size() || ws.empty() || ws.size() > cuda::kMaxDecodeTargets) {
    throw InvalidArgument("[cuda testing] matvec_targets: 1.." + std::to_string(cuda::kMaxDecodeTargets) +
                          " matrices, one n_out each");
  }
  Stream stream;
  std::vector<DeviceBuffer> dw, dw_packed, dy;
  std::vector<cuda::MatvecTarget> targets;
  for (size_t i = 0; i < ws.size(); ++i) {
    dw.push_back(upload_weights(type, ws[i], n_outs[i], k));
    dw_packed.push_back(packed_copy(type, dw.back(), n_outs[i], k, stream.get()));
    dy.emplace_back(std::max<size_t>(1, n_rows * n_outs[i]) * sizeof(float), "y");
    targets.push_back({dw.back().get(), n_outs[i], dy.back().as<float>(), n_outs[i], dw_packed.back().get()});
  }
  const DeviceActivations act(type, x, n_rows, k, stream.get());
  cuda::matvec_targets(type, targets.data(), targets.size(), act.view, n_rows, stream.get());
  stream.sync();
  std::vector<std::vector<float>> out;
  for (size_t i = 0; i < ws.size(); ++i) out.push_back(download<float>(dy[i], n_rows * n_outs[i]));
  return out;
}

std::vector<float> matvec_mma(DType type, const uint8_t* w, size_t n_out, size_t k, const float* x, size_t n_rows,
                              int split, const std::string& weights) {
  if (weights != "any" && weights != "blocks" && weights != "packed") {
    throw InvalidArgument("[cuda testing] matvec_mma: weights '" + weights + "' is not any, blocks or packed");
  }
  const cuda::MmaWeights which = weights == "any"      ? cuda::MmaWeights::kAny
                                 : weights == "blocks" ? cuda::MmaWeights::kBlocks
                                                       : cuda::MmaWeights::kPacked;
  check_matvec(type, k, n_rows, 0, 0, true, 1);
  if (n_rows > 4) throw InvalidArgument("[cuda testing] matvec_mma: the decode kernel takes 1..4 rows");
  Stream stream;
  DeviceBuffer dw = upload_weights(type, w, n_out, k);
  const DeviceBuffer dw_packed = packed_copy(type, dw, n_out, k, stream.get());
  if (dw_packed.get() == nullptr) {
    throw InvalidArgument(std::string("[cuda testing] matvec_mma: no packed copy of ") + dtype_info(type).name +
                          " weights");
  }
  DeviceBuffer dy(std::max<size_t>(1, n_rows * n_out) * sizeof(float), "y");
  const DeviceActivations act(type, x, n_rows, k, stream.get());
  const cuda::MatvecTarget target{dw.get(), n_out, dy.as<float>(), n_out, dw_packed.get()};
  if (!cuda::matvec_decode_mma(type, &target, 1, act.view, n_rows, split, which, stream.get())) {
    throw InvalidArgument(std::string("[cuda testing] matvec_mma: the tensor-core decode matvec does not take ") +
                          dtype_info(type).name + " weights with " + std::to_string(n_rows) + " rows of " +
                          std::to_string(k) + " (" + weights + ")");
  }
  stream.sync();
  return download<float>(dy, n_rows * n_out);
}

double time_matvec(DType type, const uint8_t* w, size_t n_out, size_t k, const float* x, size_t n_rows,
                   int warp_rows, int unroll, bool wide, int reps, int lane_rows) {
  check_matvec(type, k, n_rows, warp_rows, unroll, wide, lane_rows);
  if (reps <= 0 || n_out == 0) throw InvalidArgument("[cuda testing] time_matvec: n_out and reps must be positive");
  const size_t bytes = row_bytes(type, k) * n_out;
  Stream stream;
  // Copies of W, each its own allocation, cycled so that no launch finds its
  // weights in L2 (50 MB on the H100/H200).
  const size_t copies = std::min<size_t>(64, std::max<size_t>(1, ((size_t{256} << 20) + bytes - 1) / bytes));
  std::vector<DeviceBuffer> weights;
  weights.push_back(upload_weights(type, w, n_out, k));
  for (size_t i = 1; i < copies; ++i) {
    weights.emplace_back(bytes, "weight copies");
    cuda::check_cuda(cudaMemcpy(weights.back().get(), weights.front().get(), bytes, cudaMemcpyDeviceToDevice),
                     "copy weights");
  }
  const DeviceActivations act(type, x, n_rows, k, stream.get());
  DeviceBuffer dy(n_rows * n_out * sizeof(float), "y");
  auto launch = [&](size_t i) {
    launch_matvec(type, weights[i % copies].get(), n_out, act.view, n_rows, dy.as<float>(), warp_rows, unroll, wide,
                  lane_rows, stream.get());
  };
  launch(copies - 1);  // warm-up
  EventPair events;
  cudaStream_t s = static_cast<cudaStream_t>(stream.get());
  cuda::check_cuda(cudaEventRecord(events.begin, s), "cudaEventRecord");
  for (int i = 0; i < reps; ++i) launch(static_cast<size_t>(i));
  cuda::check_cuda(cudaEventRecord(events.end, s), "cudaEventRecord");
  cuda::check_cuda(cudaEventSynchronize(events.end), "time matvec");
  float ms = 0.0f;
  cuda::check_cuda(cudaEventElapsedTime(&ms, events.begin, events.end), "cudaEventElapsedTime");
  return static_cast<double>(ms) / 1000.0 / reps;
}

QuantizedRows quantize(ActivationFormat format, const float* x, size_t n_rows, size_t k) {
  require_device();
  if (format == ActivationFormat::F32 || k == 0 || k % activation_block_elems(format) != 0) {
    throw InvalidArgument("[cuda testing] quantize: a Q8 format and a block-multiple length are needed");
  }
  Stream stream;
  DeviceBuffer dx = upload(x, n_rows * k, "x");
  DeviceBuffer scratch(cuda::activation_bytes(format, n_rows, k), "activations");
  const cuda::ActivationView v = cuda::quantize_activations(format, dx.as<float>(), n_rows, k, scratch.get(), stream.get());
  stream.sync();
  QuantizedRows out;
  out.q = download_ptr(v.q, n_rows * k);
  const size_t block = activation_block_elems(format);
  out.d = download_ptr(v.d, n_rows * k / block);
  if (v.s != nullptr) out.s = download_ptr(v.s, n_rows * k / 32);
  if (v.bsum != nullptr) out.bsum = download_ptr(v.bsum, n_rows * k / 16);
  return out;
}

std::vector<float> get_rows(DType type, const uint8_t* w, size_t k, size_t n_rows_w, const std::vector<int32_t>& ids) {
  require_device();
  const DTypeInfo& info = dtype_info(type);
  if (k == 0 || k % 32 != 0 || k % info.block_elems != 0) {
    throw InvalidArgument("[cuda testing] get_rows row length must be a multiple of 32 and of the block size");
  }
  for (int32_t id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= n_rows_w) throw InvalidArgument("[cuda testing] get_rows: id out of range");
  }
  Stream stream;
  DeviceBuffer dw = upload_weights(type, w, n_rows_w, k);
  DeviceBuffer dids = upload(ids.data(), ids.size(), "ids");
  DeviceBuffer dout(ids.size() * k * sizeof(float), "out");
  cuda::get_rows(type, dw.get(), k, dids.as<int32_t>(), ids.size(), dout.as<float>(), stream.get());
  stream.sync();
  return download<float>(dout, ids.size() * k);
}

std::vector<float> rms_norm(const float* x, const float* weight, size_t n, size_t width, float eps) {
  require_device();
  Stream stream;
  DeviceBuffer dx = upload(x, n * width, "x");
  DeviceBuffer dw = upload(weight, width, "weight");
  DeviceBuffer dout(n * width * sizeof(float), "out");
  cuda::rms_norm(dx.as<float>(), dw.as<float>(), n, width, eps, dout.as<float>(), stream.get());
  stream.sync();
  return download<float>(dout, n * width);
}

NormQuantized rms_norm_quantized(ActivationFormat format, const float* x, const float* weight, size_t n, size_t width,
                                 float eps) {
  require_device();
  if ((format != ActivationFormat::Q8_0 && format != ActivationFormat::Q8_1) || width == 0 || width % 32 != 0) {
    throw InvalidArgument("[cuda testing] rms_norm_quantized: Q8_0 or Q8_1 and a width multiple of 32");
  }
  Stream stream;
  DeviceBuffer dx = upload(x, n * width, "x");
  DeviceBuffer dw = upload(weight, width, "weight");
  DeviceBuffer dout(n * width * sizeof(float), "out");
  DeviceBuffer scratch(cuda::activation_bytes(format, n, width), "activations");
  const cuda::ActivationView v = cuda::rms_norm_quantized(dx.as<float>(), dw.as<float>(), n, width, eps,
                                                          dout.as<float>(), format, scratch.get(), stream.get());
  stream.sync();
  NormQuantized r;
  r.out = download<float>(dout, n * width);
  r.q.q = download_ptr(v.q, n * width);
  r.q.d = download_ptr(v.d, n * width / 32);
  if (v.s != nullptr) r.q.s = download_ptr(v.s, n * width / 32);
  return r;
}

std::vector<float> glu(int kind, const float* gate, const float* up, size_t count) {
  require_device();
  Stream stream;
  DeviceBuffer dg = upload(gate, count, "gate");
  DeviceBuffer du = upload(up, count, "up");
  cuda::glu(kind == 0 ? cuda::Glu::Silu : cuda::Glu::GeluTanh, dg.as<float>(), dg.as<float>(), du.as<float>(), count,
            stream.get());
  stream.sync();
  return download<float>(dg, count);
}

AddNormed add_rms_norm(ActivationFormat format, const float* a, const float* b, const float* weight, size_t n,
                       size_t width, float eps) {
  require_device();
  const bool quantize = format != ActivationFormat::F32;
  if (width == 0 || (quantize && (format == ActivationFormat::Q8_K || width % 32 != 0))) {
    throw InvalidArgument("[cuda testing] add_rms_norm: F32, Q8_0 or Q8_1 (then a width multiple of 32)");
  }
  Stream stream;
  DeviceBuffer da = upload(a, n * width, "a");
  DeviceBuffer db = upload(b, n * width, "b");
  DeviceBuffer dw = upload(weight, width, "weight");
  DeviceBuffer dout(n * width * sizeof(float), "out");
  DeviceBuffer scratch(std::max<size_t>(cuda::activation_bytes(format, n, width), 1), "activations");
  // In place, as the backend runs it: the sums overwrite a.
  const cuda::ActivationView v = cuda::add_rms_norm(da.as<float>(), da.as<float>(), db.as<float>(), dw.as<float>(), n,
                                                    width, eps, dout.as<float>(), format, scratch.get(), stream.get());
  stream.sync();
  AddNormed r;
  r.sum = download<float>(da, n * width);
  r.normed.out = download<float>(dout, n * width);
  if (quantize) {
    r.normed.q.q = download_ptr(v.q, n * width);
    r.normed.q.d = download_ptr(v.d, n * width / 32);
    if (v.s != nullptr) r.normed.q.s = download_ptr(v.s, n * width / 32);
  }
  return r;
}

NormQuantized glu_quantized(ActivationFormat format, int kind, const float* gate, const float* up, size_t n_rows,
                            size_t width) {
  require_device();
  if ((format != ActivationFormat::Q8_0 && format != ActivationFormat::Q8_1) || width == 0 || width % 32 != 0) {
    throw InvalidArgument("[cuda testing] glu_quantized: Q8_0 or Q8_1 and a width multiple of 32");
  }
  Stream stream;
  const size_t count = n_rows * width;
  DeviceBuffer dg = upload(gate, count, "gate");
  DeviceBuffer du = upload(up, count, "up");
  DeviceBuffer dout(count * sizeof(float), "out");
  DeviceBuffer scratch(cuda::activation_bytes(format, n_rows, width), "activations");
  const cuda::ActivationView v =
      cuda::glu_quantized(kind == 0 ? cuda::Glu::Silu : cuda::Glu::GeluTanh, dout.as<float>(), dg.as<float>(),
                          du.as<float>(), n_rows, width, format, scratch.get(), stream.get());
  stream.sync();
  NormQuantized r;
  r.out = download<float>(dout, count);
  r.q.q = download_ptr(v.q, count);
  r.q.d = download_ptr(v.d, count / 32);
  if (v.s != nullptr) r.q.s = download_ptr(v.s, count / 32);
  return r;
}

std::vector<float> softcap(const float* x, size_t count, float cap) {
  require_device();
  Stream stream;
  DeviceBuffer dx = upload(x, count, "x");
  cuda::softcap(dx.as<float>(), dx.as<float>(), count, cap, stream.get());
  stream.sync();
  return download<float>(dx, count);
}

namespace {

// base^(-2i / n_rot) for i < n_rot / 2, each divided by divisors[i] when
// divisors are given: the frequency table the backend uploads for a Rope.
std::vector<double> rope_inv_freq(double base, size_t n_rot, const std::vector<float>& divisors) {
  std::vector<double> inv_freq(n_rot / 2);
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    inv_freq[i] = std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(n_rot));
    if (!divisors.empty()) inv_freq[i] /= static_cast<double>(divisors[i]);
  }
  return inv_freq;
}

}  // namespace

std::vector<float> rope(const float* x, size_t n_rows, size_t n_heads, size_t head_dim, size_t n_rot, bool neox,
                        const std::vector<int32_t>& positions, double base, double position_scale,
                        const std::vector<float>& divisors) {
  require_device();
  if (positions.size() != n_rows || n_rot > head_dim || n_rot % 2 != 0) {
    throw InvalidArgument("[cuda testing] rope: one position per row, even n_rot <= head_dim");
  }
  const std::vector<double> inv_freq = rope_inv_freq(base, n_rot, divisors);
  Stream stream;
  DeviceBuffer dx = upload(x, n_rows * n_heads * head_dim, "x");
  DeviceBuffer dpos = upload(positions.data(), positions.size(), "positions");
  DeviceBuffer dfreq = upload(inv_freq.data(), inv_freq.size(), "inv_freq");
  cuda::rope(dx.as<float>(), n_rows, n_heads, head_dim, n_rot, neox, dpos.as<int32_t>(), dfreq.as<double>(),
             position_scale, stream.get());
  stream.sync();
  return download<float>(dx, n_rows * n_heads * head_dim);
}

std::vector<float> rope_pair(const float* a, size_t n_heads_a, const float* b, size_t n_heads_b, size_t n_rows,
                             size_t head_dim, size_t n_rot, bool neox, const std::vector<int32_t>& positions,
                             double base) {
  require_device();
  if (positions.size() != n_rows || n_rot > head_dim || n_rot % 2 != 0) {
    throw InvalidArgument("[cuda testing] rope_pair: one position per row, even n_rot <= head_dim");
  }
  const std::vector<double> inv_freq = rope_inv_freq(base, n_rot, {});
  Stream stream;
  const size_t na = n_rows * n_heads_a * head_dim, nb = n_rows * n_heads_b * head_dim;
  DeviceBuffer da = upload(a, na, "a");
  DeviceBuffer db = upload(b, nb, "b");
  DeviceBuffer dpos = upload(positions.data(), positions.size(), "positions");
  DeviceBuffer dfreq = upload(inv_freq.data(), inv_freq.size(), "inv_freq");
  cuda::rope_pair(da.as<float>(), n_heads_a, db.as<float>(), n_heads_b, n_rows, head_dim, n_rot, neox,
                  dpos.as<int32_t>(), dfreq.as<double>(), 1.0, stream.get());
  stream.sync();
  std::vector<float> out = download<float>(da, na);
  const std::vector<float> rb = download<float>(db, nb);
  out.insert(out.end(), rb.begin(), rb.end());
  return out;
}

RopeKvResult rope_pair_kv(const float* a, size_t n_heads_a, const float* b, size_t n_heads_b, const float* v,
                          size_t v_width, size_t n_rows, size_t head_dim, size_t n_rot, bool neox,
                          const std::vector<int32_t>& positions, double base, size_t plane_rows, size_t ring_rows,
                          const std::vector<int32_t>& writes, bool fused) {
  require_device();
  if (positions.size() != n_rows || writes.size() != n_rows || n_rot == 0 || n_rot > head_dim || n_rot % 2 != 0 ||
      n_heads_a == 0 || n_heads_b == 0) {
    throw InvalidArgument(
        "[cuda testing] rope_pair_kv: one position and write flag per row, 0 < even n_rot <= head_dim");
  }
  for (int32_t p : positions) {
    const size_t row = ring_rows > 0 ? static_cast<size_t>(p) % ring_rows : static_cast<size_t>(p);
    if (p < 0 || row >= plane_rows) throw InvalidArgument("[cuda testing] rope_pair_kv: position outside the planes");
  }
  const std::vector<double> inv_freq = rope_inv_freq(base, n_rot, {});
  const size_t k_width = n_heads_b * head_dim;
  Stream stream;
  const size_t na = n_rows * n_heads_a * head_dim, nb = n_rows * k_width;
  DeviceBuffer da = upload(a, na, "a");
  DeviceBuffer db = upload(b, nb, "b");
  DeviceBuffer dv = upload(v, n_rows * v_width, "v");
  DeviceBuffer dpos = upload(positions.data(), n_rows, "positions");
  DeviceBuffer dfreq = upload(inv_freq.data(), inv_freq.size(), "inv_freq");
  // Two layers; the session table is {K0, K1, V0, V1}.
  const std::vector<uint16_t> fill_k(plane_rows * k_width, 0xffff), fill_v(plane_rows * v_width, 0xffff);
  DeviceBuffer planes[4] = {upload(fill_k.data(), fill_k.size(), "K0"), upload(fill_k.data(), fill_k.size(), "K1"),
                            upload(fill_v.data(), fill_v.size(), "V0"), upload(fill_v.data(), fill_v.size(), "V1")};
  const uint16_t* table_host[4] = {planes[0].as<uint16_t>(), planes[1].as<uint16_t>(), planes[2].as<uint16_t>(),
                                   planes[3].as<uint16_t>()};
  DeviceBuffer dtable = upload(table_host, 4, "table");
  std::vector<const uint16_t* const*> tables(n_rows, dtable.as<const uint16_t* const>());
  DeviceBuffer dtables = upload(tables.data(), n_rows, "tables");
  const std::vector<int32_t> ring_sizes(n_rows, static_cast<int32_t>(ring_rows));
  DeviceBuffer dring = upload(ring_sizes.data(), n_rows, "ring rows");
  DeviceBuffer dwrites = upload(writes.data(), n_rows, "writes");
  cuda::KvRows kv;
  kv.tables = dtables.as<const uint16_t* const* const>();
  kv.positions = dpos.as<int32_t>();
  kv.ring_rows = dring.as<int32_t>();
  kv.writes = dwrites.as<int32_t>();
  const bool ring = ring_rows > 0;
  if (fused) {
    cuda::rope_pair_kv(da.as<float>(), n_heads_a, db.as<float>(), n_heads_b, n_rows, head_dim, n_rot, neox,
                       dpos.as<int32_t>(), dfreq.as<double>(), 1.0, kv, 2, 1, ring, dv.as<float>(), v_width,
                       stream.get());
  } else {
    cuda::rope_pair(da.as<float>(), n_heads_a, db.as<float>(), n_heads_b, n_rows, head_dim, n_rot, neox,
                    dpos.as<int32_t>(), dfreq.as<double>(), 1.0, stream.get());
    cuda::write_kv(kv, 2, 1, ring, db.as<float>(), k_width, dv.as<float>(), v_width, n_rows, stream.get());
  }
  stream.sync();
  RopeKvResult r;
  r.a = download<float>(da, na);
  r.b = download<float>(db, nb);
  r.k_plane = download<uint16_t>(planes[1], plane_rows * k_width);
  r.v_plane = download<uint16_t>(planes[3], plane_rows * v_width);
  return r;
}

namespace {

// Runs the attention of case c once, then (reps > 0) reps more times on the
// same scratch, each after a write of 256 MiB that evicts the KV from L2 (as
// a decode step's weights do between layers) and after the output is
// poisoned with NaNs; *us gets the mean of the timed launches. Every timed
// launch must give the first one's bits: the scratch's per-(row, head)
// counters decide which block folds the partials, and a launch that left
// them dirty would leave the next one's output unwritten.
cuda::AttentionKernel kernel_of(const AttentionCase& c) {
  switch (c.kernel) {
    case AttentionCase::Kernel::Decode: return cuda::AttentionKernel::Decode;
    case AttentionCase::Kernel::Prefill: return cuda::AttentionKernel::Prefill;
    case AttentionCase::Kernel::Auto: break;
  }
  return cuda::AttentionKernel::Auto;
}

std::vector<float> run_attention(const AttentionCase& c, int reps, double* us,
                                 ActivationFormat format = ActivationFormat::F32, QuantizedRows* quantized = nullptr,
                                 const std::vector<size_t>* later_row_counts = nullptr) {
  require_device();
  const size_t n_rows = c.positions.size();
  const size_t k_width = c.n_head_kv * c.head_dim_k, v_width = c.n_head_kv * c.head_dim_v;
  if (c.n_head_kv == 0 || c.n_head % c.n_head_kv != 0 || c.k_plane.size() != c.plane_rows * k_width ||
      c.v_plane.size() != c.plane_rows * v_width || c.q.size() != n_rows * c.n_head * c.head_dim_k) {
    throw InvalidArgument("[cuda testing] attention: inconsistent shapes");
  }
  for (int32_t p : c.positions) {
    const size_t rows_needed = c.ring_rows > 0 ? c.ring_rows : static_cast<size_t>(p) + 1;
    if (p < 0 || rows_needed > c.plane_rows) throw InvalidArgument("[cuda testing] attention: position outside the planes");
  }
  Stream stream;
  if (c.plane_copies == 0 || c.plane_copies > 8) throw InvalidArgument("[cuda testing] attention: 1..8 plane copies");
  // One layer per session: its table holds {K plane, V plane}; row r is
  // session r % plane_copies.
  std::vector<DeviceBuffer> planes, session_tables;
  for (size_t i = 0; i < c.plane_copies; ++i) {
    planes.push_back(upload(c.k_plane.data(), c.k_plane.size(), "k plane"));
    planes.push_back(upload(c.v_plane.data(), c.v_plane.size(), "v plane"));
    const uint16_t* table_host[2] = {planes[2 * i].as<uint16_t>(), planes[2 * i + 1].as<uint16_t>()};
    session_tables.push_back(upload(table_host, 2, "table"));
  }
  std::vector<const uint16_t* const*> tables(n_rows);
  for (size_t r = 0; r < n_rows; ++r) tables[r] = session_tables[r % c.plane_copies].as<const uint16_t* const>();
  DeviceBuffer dtables = upload(tables.data(), n_rows, "tables");
  std::vector<int32_t> ring(n_rows, static_cast<int32_t>(c.ring_rows));
  DeviceBuffer dpos = upload(c.positions.data(), n_rows, "positions");
  DeviceBuffer dring = upload(ring.data(), n_rows, "ring rows");
  DeviceBuffer dq = upload(c.q.data(), c.q.size(), "q");
  DeviceBuffer dout(n_rows * c.n_head * c.head_dim_v * sizeof(float), "out");
  cuda::KvRows kv;
  kv.tables = dtables.as<const uint16_t* const* const>();
  kv.positions = dpos.as<int32_t>();
  kv.ring_rows = dring.as<int32_t>();
  // The later and the timed launches also get the positions on the host (as
  // the backend's uncaptured prefill steps do): their grids then hold only
  // the splits the rows use, and they must give the first launch's bits.
  cuda::KvRows kv_known = kv;
  kv_known.host_positions = c.positions.data();
  cuda::AttentionShape shape;
  shape.n_layer = 1;
  shape.layer = 0;
  shape.ring = c.ring_rows > 0;
  shape.n_head = c.n_head;
  shape.n_head_kv = c.n_head_kv;
  shape.head_dim_k = c.head_dim_k;
  shape.head_dim_v = c.head_dim_v;
  shape.window = c.window;
  shape.scale = c.scale;
  DeviceBuffer scratch(cuda::attention_scratch_bytes(shape, n_rows), "attention partials");
  cuda::clear_attention_scratch(scratch.get(), scratch.bytes(), stream.get());
  const size_t n_out = n_rows * c.n_head * c.head_dim_v;
  if (format != ActivationFormat::F32) {
    DeviceBuffer q_scratch(cuda::activation_bytes(format, n_rows, c.n_head * c.head_dim_v), "quantized out");
    const cuda::ActivationView v = cuda::attention_quantized(kv, shape, dq.as<float>(), n_rows, dout.as<float>(),
                                                             scratch.get(), format, q_scratch.get(), stream.get(),
                                                             kernel_of(c), c.prefill_warps);
    stream.sync();
    quantized->q = download_ptr(v.q, n_out);
    quantized->d = download_ptr(v.d, n_out / 32);
    if (v.s != nullptr) quantized->s = download_ptr(v.s, n_out / 32);
  } else {
    cuda::attention(kv, shape, dq.as<float>(), n_rows, dout.as<float>(), scratch.get(), stream.get(), kernel_of(c),
                      c.prefill_warps);
    stream.sync();
  }
  std::vector<float> first = download<float>(dout, n_out);
  if (later_row_counts != nullptr) {
    // Launches over the first n rows on the same scratch, output poisoned
    // first: each row must give its bits from the first launch (the
    // counters and partials of launches of other sizes must not collide).
    const size_t row_floats = c.n_head * c.head_dim_v;
    for (size_t n : *later_row_counts) {
      if (n == 0 || n > n_rows) throw InvalidArgument("[cuda testing] attention: a later row count outside 1..rows");
      cuda::check_cuda(cudaMemsetAsync(dout.get(), 0xff, n_out * sizeof(float), static_cast<cudaStream_t>(stream.get())),
                       "poison");
      cuda::attention(kv_known, shape, dq.as<float>(), n, dout.as<float>(), scratch.get(), stream.get(),
                      kernel_of(c), c.prefill_warps);
      stream.sync();
      const std::vector<float> again = download<float>(dout, n * row_floats);
      if (std::memcmp(again.data(), first.data(), n * row_floats * sizeof(float)) != 0) {
        throw InternalError("[cuda testing] attention: a later launch of " + std::to_string(n) +
                            " rows on the shared scratch gave other bits");
      }
    }
  }
  if (reps > 0) {
    constexpr size_t kFlushBytes = size_t{256} << 20;
    DeviceBuffer flush(kFlushBytes, "L2 flush");
    EventPair events;
    double total_ms = 0.0;
    cudaError_t err = cudaSuccess;
    for (int i = 0; i < reps && err == cudaSuccess; ++i) {
      cudaStream_t s = static_cast<cudaStream_t>(stream.get());
      err = cudaMemsetAsync(flush.get(), i & 0xff, kFlushBytes, s);
      if (err == cudaSuccess) err = cudaMemsetAsync(dout.get(), 0xff, n_out * sizeof(float), s);
      if (err == cudaSuccess) err = cudaEventRecord(events.begin, s);
      if (err == cudaSuccess) {
        cuda::attention(kv_known, shape, dq.as<float>(), n_rows, dout.as<float>(), scratch.get(), stream.get(),
                        kernel_of(c), c.prefill_warps);
        err = cudaEventRecord(events.end, s);
      }
      if (err == cudaSuccess) err = cudaEventSynchronize(events.end);
      float ms = 0.0f;
      if (err == cudaSuccess) err = cudaEventElapsedTime(&ms, events.begin, events.end);
      total_ms += ms;
    }
    cuda::check_cuda(err, "timed attention");
    *us = 1000.0 * total_ms / reps;
    const std::vector<float> last = download<float>(dout, n_out);
    if (std::memcmp(last.data(), first.data(), n_out * sizeof(float)) != 0) {
      throw InternalError("[cuda testing] attention: a repeated launch on one scratch gave other bits");
    }
  }
  return first;
}

}  // namespace

std::vector<float> attention(const AttentionCase& c) { return run_attention(c, 0, nullptr); }

void attention_on_shared_scratch(const AttentionCase& c, const std::vector<size_t>& later_row_counts) {
  run_attention(c, 0, nullptr, ActivationFormat::F32, nullptr, &later_row_counts);
}

NormQuantized attention_quantized(const AttentionCase& c, ActivationFormat format) {
  if ((format != ActivationFormat::Q8_0 && format != ActivationFormat::Q8_1) || c.head_dim_v % 32 != 0) {
    throw InvalidArgument("[cuda testing] attention_quantized: Q8_0 or Q8_1 and heads of a multiple of 32");
  }
  NormQuantized r;
  r.out = run_attention(c, 0, nullptr, format, &r.q);
  return r;
}

double attention_time_us(const AttentionCase& c, int reps) {
  if (reps <= 0) throw InvalidArgument("[cuda testing] attention_time_us: reps must be positive");
  double us = 0.0;
  run_attention(c, reps, &us);
  return us;
}

namespace {

// Rows [r0, ...) of an activation view (pointers moved by r0 rows).
cuda::ActivationView view_from_row(const cuda::ActivationView& v, size_t r0) {
  cuda::ActivationView out = v;
  const size_t k = v.k;
  if (out.q != nullptr) out.q += r0 * k;
  if (out.d != nullptr) out.d += r0 * (k / activation_block_elems(v.format));
  if (out.s != nullptr) out.s += r0 * (k / 32);
  if (out.bsum != nullptr) out.bsum += r0 * (k / 16);
  if (out.f != nullptr) out.f += r0 * k;
  return out;
}

enum class MatmulPath { Matvec, Gemm, GemmOnBlocks };

// x (n_rows, k) times W through one matvec call (group_rows 0), one call per
// consecutive group of group_rows rows, or the GEMM (on the packed copy
// where its type has one, or on the blocks). With `us`: also times `reps`
// more runs after the first and stores the mean microseconds per run.
std::vector<float> run_matmul(MatmulPath path, DType type, const uint8_t* w, size_t n_out, size_t k, const float* x,
                              size_t n_rows, size_t group_rows, int reps = 0, double* us = nullptr) {
  require_device();
  const DTypeInfo& info = dtype_info(type);
  if (k == 0 || k % 32 != 0 || k % info.block_elems != 0) {
    throw InvalidArgument("[cuda testing] matvec row length must be a multiple of 32 and of the block size");
  }
  if (group_rows > 4) throw InvalidArgument("[cuda testing] matvec groups hold 1..4 rows (0: all rows at once)");
  const bool gemm = path != MatmulPath::Matvec;
  if (gemm && !cuda::has_gemm_mma(type)) {
    throw InvalidArgument(std::string("[cuda testing] no tensor-core GEMM for ") + info.name);
  }
  Stream stream;
  DeviceBuffer dw = upload_weights(type, w, n_out, k);
  // The GEMM's packed copy (where gemm_packs(type)), unless the GEMM is to read the blocks.
  const DeviceBuffer dw_packed =
      path == MatmulPath::GemmOnBlocks ? DeviceBuffer() : packed_copy(type, dw, n_out, k, stream.get());
  const void* w_packed = dw_packed.get();
  DeviceBuffer dy(n_rows * n_out * sizeof(float), "y");
  const DeviceActivations act(type, x, n_rows, k, stream.get());
  const cuda::ActivationView& view = act.view;
  auto run = [&] {
    if (gemm) {
      if (!cuda::gemm_mma(type, dw.get(), n_out, view, n_rows, dy.as<float>(), n_out, stream.get(), w_packed)) {
        throw InvalidArgument(
            "[cuda testing] the tensor-core GEMM refused this matrix (it must start and end 4-byte aligned)");
      }
    } else if (group_rows == 0) {
      cuda::matvec(type, dw.get(), n_out, view, n_rows, dy.as<float>(), n_out, stream.get(), w_packed);
    } else {
      for (size_t r0 = 0; r0 < n_rows; r0 += group_rows) {
        const size_t rows = std::min(group_rows, n_rows - r0);
        cuda::matvec(type, dw.get(), n_out, view_from_row(view, r0), rows, dy.as<float>() + r0 * n_out, n_out,
                     stream.get());
      }
    }
  };
  run();
  stream.sync();
  if (us != nullptr) {
    EventPair events;
    cudaStream_t s = static_cast<cudaStream_t>(stream.get());
    cudaError_t status = cudaEventRecord(events.begin, s);
    for (int i = 0; i < reps && status == cudaSuccess; ++i) run();
    if (status == cudaSuccess) status = cudaEventRecord(events.end, s);
    if (status == cudaSuccess) status = cudaEventSynchronize(events.end);
    float ms = 0.0f;
    if (status == cudaSuccess) status = cudaEventElapsedTime(&ms, events.begin, events.end);
    cuda::check_cuda(status, "time matvec");
    *us = 1000.0 * ms / reps;
  }
  return download<float>(dy, n_rows * n_out);
}

}  // namespace

std::vector<float> matvec_groups(DType type, const uint8_t* w, size_t n_out, size_t k, const float* x, size_t n_rows,
                                 size_t group_rows) {
  if (group_rows == 0) throw InvalidArgument("[cuda testing] matvec_groups: groups of 1..4 rows");
  return run_matmul(MatmulPath::Matvec, type, w, n_out, k, x, n_rows, group_rows);
}

std::vector<float> gemm_mma(DType type, const uint8_t* w, size_t n_out, size_t k, const float* x, size_t n_rows,
                            bool packed) {
  return run_matmul(packed ? MatmulPath::Gemm : MatmulPath::GemmOnBlocks, type, w, n_out, k, x, n_rows, 0);
}

double matvec_time_us(DType type, const uint8_t* w, size_t n_out, size_t k, const float* x, size_t n_rows,
                      size_t group_rows, int reps) {
  if (reps <= 0) throw InvalidArgument("[cuda testing] matvec_time_us: reps must be positive");
  double us = 0.0;
  run_matmul(MatmulPath::Matvec, type, w, n_out, k, x, n_rows, group_rows, reps, &us);
  return us;
}

size_t device_free_bytes() {
  require_device();
  size_t free_bytes = 0, total_bytes = 0;
  cuda::device_memory(&free_bytes, &total_bytes);
  return free_bytes;
}

size_t shared_memory_per_block_optin() {
  require_device();
  return cuda::shared_memory_per_block_optin();
}

bool gemm_packs(DType type) {
  require_device();
  return cuda::gemm_packs(type);
}

bool attention_uses_tensor_cores(size_t n_head, size_t n_head_kv, size_t head_dim_k, size_t head_dim_v) {
  cuda::AttentionShape shape;
  shape.n_head = n_head;
  shape.n_head_kv = n_head_kv;
  shape.head_dim_k = head_dim_k;
  shape.head_dim_v = head_dim_v;
  return cuda::attention_mma_applies(shape);
}

DeviceMemoryHold::DeviceMemoryHold(size_t bytes) {
  require_device();
  cuda::DeviceBuffer buf(bytes, "test hold");
  ptr_ = buf.release();  // freed by release()
}

void DeviceMemoryHold::release() noexcept {
  if (ptr_ != nullptr) cudaFree(ptr_);
  ptr_ = nullptr;
}

}  // namespace muser::cuda_testing
