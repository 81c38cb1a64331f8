// Issue rates that bound the tensor-core prefill GEMM (issue 12), measured
// alone on the device: the int8 mma.sync m16n8k32 alone, and the same MMAs
// with the 16 float instructions per MMA that the exactness contract costs
// (magic-number convert, dw * da, * sum, + acc for each of the MMA's 4
// outputs per lane), with 4, 8 and 16 warps per SM. It tells how fast a
// GEMM can be whose other instructions (copies, decode, ldmatrix, tree)
// were free.
//
//   nvcc -O3 -arch=sm_90 --fmad=false -o /tmp/mma_rate benchmarks/device/mma_rate.cu && /tmp/mma_rate
#include <cstdio>

#include <cuda_runtime.h>

constexpr int kMagicBits = 0x4B400000;
constexpr float kMagic = 12582912.0f;

__device__ __forceinline__ void mma_s8(int (&d)[4], const int (&a)[4], int b0, int b1, int c) {
  asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
               "{%10, %11, %12, %13};\n"
               : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(c), "r"(c), "r"(c), "r"(c));
}

// kTiles independent m16n8 tiles per warp and step; with kFloat each tile's
// 4 results go through the GEMM's float expression into 4 accumulators.
template <int kTiles, bool kFloat>
__global__ void rate_kernel(int steps, const float* scales, float* out) {
  int a[4] = {static_cast<int>(threadIdx.x), 3, 5, 7};
  int b0 = threadIdx.x * 7, b1 = threadIdx.x * 13;
  float acc[kTiles][4] = {};
  float wd = scales[threadIdx.x % 32], ad = scales[32 + threadIdx.x % 32];
  for (int s = 0; s < steps; ++s) {
    // Scales that change every step, so that dw * da stays one multiply per
    // output and step (as in the GEMM) instead of being hoisted.
    wd = wd * 1.0000001f;
    float wdc[4], adi[kTiles];
#pragma unroll
    for (int c = 0; c < 4; ++c) wdc[c] = wd + static_cast<float>(c);
#pragma unroll
    for (int i = 0; i < kTiles; ++i) adi[i] = ad + static_cast<float>(i);
#pragma unroll
    for (int i = 0; i < kTiles; ++i) {
      int d[4];
      mma_s8(d, a, b0 + i, b1, kMagicBits);
      if constexpr (kFloat) {
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const float sumf = __int_as_float(d[c]) - kMagic;
          acc[i][c] = acc[i][c] + sumf * (wdc[c] * adi[i]);
        }
      } else {
        acc[i][0] += __int_as_float(d[0] ^ d[1] ^ d[2] ^ d[3]);
      }
    }
    b0 += 1;
  }
  float t = 0.0f;
#pragma unroll
  for (int i = 0; i < kTiles; ++i)
#pragma unroll
    for (int c = 0; c < 4; ++c) t += acc[i][c];
  out[blockIdx.x * blockDim.x + threadIdx.x] = t;
}

template <int kTiles, bool kFloat>
void measure(int warps_per_sm, int n_sm, float* scales, float* out) {
  const int steps = 4096;
  const int blocks = n_sm * (warps_per_sm >= 4 ? warps_per_sm / 4 : 1);
  const int threads = warps_per_sm >= 4 ? 128 : 32 * warps_per_sm;
  rate_kernel<kTiles, kFloat><<<blocks, threads>>>(steps, scales, out);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  cudaEventRecord(e0);
  for (int rep = 0; rep < 5; ++rep) rate_kernel<kTiles, kFloat><<<blocks, threads>>>(steps, scales, out);
  cudaEventRecord(e1);
  cudaEventSynchronize(e1);
  float ms = 0.0f;
  cudaEventElapsedTime(&ms, e0, e1);
  const double mmas = 5.0 * blocks * (threads / 32) * steps * kTiles;
  const double tops = mmas * 2.0 * 16 * 8 * 32 / (ms * 1e-3) / 1e12;
  printf("mma_rate tiles %2d float %d warps/SM %2d: %8.1f int8 TOPS, %6.2f ns per MMA per SM\n", kTiles,
         kFloat ? 1 : 0, warps_per_sm, tops, ms * 1e6 / (mmas / n_sm));
}

int main() {
  int n_sm = 0;
  cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, 0);
  float *scales, *out;
  cudaMalloc(&scales, 64 * sizeof(float));
  cudaMemset(scales, 0, 64 * sizeof(float));
  cudaMalloc(&out, 64 * 1024 * 1024);
  for (int warps : {4, 8, 16}) {
    measure<8, false>(warps, n_sm, scales, out);
    measure<8, true>(warps, n_sm, scales, out);
  }
  measure<16, true>(8, n_sm, scales, out);
  const cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess) {
    printf("mma_rate: %s\n", cudaGetErrorString(err));
    return 1;
  }
  return 0;
}
