// Element-wise kernels over rows of float32: gated activations (SwiGLU,
// GeGLU), residual/bias add, scale and soft-capping. Each output element is a
// fixed function of its inputs (the same formulas as the CPU backend's
// scalar ops), so rows never depend on their batch.
// Grid: (ceil(n / 256), n_rows, 1); threadgroup: 256 threads.
#include <metal_stdlib>

#include "backend/metal/kernel_args.h"

using namespace metal;

// out = silu(gate) * up = gate / (1 + exp(-gate)) * up
kernel void swiglu_f32(device const float* gate [[buffer(0)]], device const float* up [[buffer(1)]],
                       device float* out [[buffer(2)]], constant ElementwiseArgs& args [[buffer(3)]],
                       uint3 position [[thread_position_in_grid]]) {
  const uint i = position.x;
  if (i >= args.n) return;
  const float g = gate[ulong(position.y) * args.a_stride + i];
  const float u = up[ulong(position.y) * args.b_stride + i];
  out[ulong(position.y) * args.out_stride + i] = g / (1.0f + exp(-g)) * u;
}

// out = gelu_tanh(gate) * up, using 0.5 g (1 + tanh(t)) = g / (1 + exp(-2t)),
// t = sqrt(2/pi) (g + 0.044715 g^3).
kernel void geglu_f32(device const float* gate [[buffer(0)]], device const float* up [[buffer(1)]],
                      device float* out [[buffer(2)]], constant ElementwiseArgs& args [[buffer(3)]],
                      uint3 position [[thread_position_in_grid]]) {
  const uint i = position.x;
  if (i >= args.n) return;
  const float minus_two_sqrt_2_over_pi = -1.5957691216057308f;
  const float cubic = 0.044715f;
  const float g = gate[ulong(position.y) * args.a_stride + i];
  const float u = up[ulong(position.y) * args.b_stride + i];
  out[ulong(position.y) * args.out_stride + i] =
      g / (1.0f + exp(minus_two_sqrt_2_over_pi * g * (1.0f + cubic * g * g))) * u;
}

// out = a + b (b_stride 0 broadcasts b's first row: a bias).
kernel void add_f32(device const float* a [[buffer(0)]], device const float* b [[buffer(1)]],
                    device float* out [[buffer(2)]], constant ElementwiseArgs& args [[buffer(3)]],
                    uint3 position [[thread_position_in_grid]]) {
  const uint i = position.x;
  if (i >= args.n) return;
  out[ulong(position.y) * args.out_stride + i] =
      a[ulong(position.y) * args.a_stride + i] + b[ulong(position.y) * args.b_stride + i];
}

// out = x * value
kernel void scale_f32(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                      constant ElementwiseArgs& args [[buffer(2)]],
                      uint3 position [[thread_position_in_grid]]) {
  const uint i = position.x;
  if (i >= args.n) return;
  out[ulong(position.y) * args.out_stride + i] = x[ulong(position.y) * args.a_stride + i] * args.value;
}

// out = value * tanh(x / value)
kernel void softcap_f32(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                        constant ElementwiseArgs& args [[buffer(2)]],
                        uint3 position [[thread_position_in_grid]]) {
  const uint i = position.x;
  if (i >= args.n) return;
  out[ulong(position.y) * args.out_stride + i] = args.value * tanh(x[ulong(position.y) * args.a_stride + i] / args.value);
}

// out = x (columns from x's slice offset; the host binds x at that offset)
kernel void copy_f32(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                     constant ElementwiseArgs& args [[buffer(2)]],
                     uint3 position [[thread_position_in_grid]]) {
  const uint i = position.x;
  if (i >= args.n) return;
  out[ulong(position.y) * args.out_stride + i] = x[ulong(position.y) * args.a_stride + i];
}
