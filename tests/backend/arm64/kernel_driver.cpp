// arm64 kernel check, cross-compiled and run under qemu-user by
// tests/backend/test_arm64_kernels.py (no Python on the emulated side).
//
//   kernel_driver <isa>     (neon, neon_dotprod, neon_i8mm, or "detect")
//
// "detect" prints the instruction sets isa.cpp finds on this (emulated) CPU,
// one per line, and exits. Otherwise, for every weight type and shape, with
// the table of <isa> against the scalar reference (tensor/reference_kernels):
//  - activation quantizers write exactly the reference's bytes;
//  - quantized types: every tile output equals ref::vec_dot bit for bit;
//  - float types: within 1e-5 of sum |w x| of the reference;
//  - every output of a 1..5-row tile equals that row computed alone, and a
//    tile split into two calls over the output rows gives the same bits.
// Sizes: 1, 31, 32 and 33 weight rows; 1, 2, 31, 32 and 33 blocks per row (so
// every unrolled path and tail runs). Prints one line per failure and a
// summary; exit status 0 only when everything matched.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/kernel_set.h"
#include "tensor/dtype.h"
#include "tensor/half_float.h"
#include "tensor/reference_kernels.h"

using namespace muser;

namespace {

struct TypeCase {
  DType type;
  const char* name;
  // Byte offsets of the fp16 scale/min fields in a block (random bytes there
  // could be inf/NaN; they get modest finite values instead).
  std::vector<size_t> fp16_fields;
};

const std::vector<TypeCase>& type_cases() {
  static const std::vector<TypeCase> cases = {
      {DType::F32, "F32", {}},         {DType::F16, "F16", {}},         {DType::BF16, "BF16", {}},
      {DType::Q4_0, "Q4_0", {0}},      {DType::Q4_1, "Q4_1", {0, 2}},   {DType::Q5_0, "Q5_0", {0}},
      {DType::Q5_1, "Q5_1", {0, 2}},   {DType::Q8_0, "Q8_0", {0}},      {DType::Q2_K, "Q2_K", {80, 82}},
      {DType::Q3_K, "Q3_K", {108}},    {DType::Q4_K, "Q4_K", {0, 2}},   {DType::Q5_K, "Q5_K", {0, 2}},
      {DType::Q6_K, "Q6_K", {208}},
  };
  return cases;
}

std::vector<uint8_t> random_weights(const TypeCase& tc, size_t n, size_t rows, std::mt19937& rng) {
  const DTypeInfo& info = dtype_info(tc.type);
  const size_t row = static_cast<size_t>(row_bytes(tc.type, n));
  std::vector<uint8_t> bytes(row * rows);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  if (tc.type == DType::F32 || tc.type == DType::F16 || tc.type == DType::BF16) {
    for (size_t i = 0; i < n * rows; ++i) {
      const float v = value(rng);
      if (tc.type == DType::F32) {
        std::memcpy(&bytes[4 * i], &v, 4);
      } else {
        const uint16_t h = tc.type == DType::F16 ? fp32_to_fp16(v) : fp32_to_bf16(v);
        std::memcpy(&bytes[2 * i], &h, 2);
      }
    }
    return bytes;
  }
  std::uniform_int_distribution<int> byte(0, 255);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(byte(rng));
  const size_t blocks = n / info.block_elems * rows;
  for (size_t k = 0; k < blocks; ++k) {
    for (size_t offset : tc.fp16_fields) {
      const uint16_t h = fp32_to_fp16(0.05f * value(rng));
      std::memcpy(&bytes[k * info.block_bytes + offset], &h, 2);
    }
  }
  return bytes;
}

struct Checker {
  const char* isa;
  int failures = 0;
  int checks = 0;
  void fail(const std::string& what) {
    if (failures < 40) std::printf("FAIL %s: %s\n", isa, what.c_str());
    ++failures;
  }
};

std::string where(const TypeCase& tc, size_t n, size_t out_rows, size_t act_rows) {
  return std::string(tc.name) + " n=" + std::to_string(n) + " outputs=" + std::to_string(out_rows) +
         " rows=" + std::to_string(act_rows);
}

bool same_bits(float a, float b) {
  uint32_t x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  return x == y;
}

void check_type(const cpu::KernelSet& set, const TypeCase& tc, Checker& c, std::mt19937& rng) {
  const DTypeInfo& info = dtype_info(tc.type);
  const uint32_t id = static_cast<uint32_t>(tc.type);
  const ActivationFormat format = activation_format(tc.type);
  const bool is_float = tc.type == DType::F32 || tc.type == DType::F16 || tc.type == DType::BF16;
  const size_t block = info.block_elems > 1 ? info.block_elems : 32;
  constexpr size_t kActRows = 5;
  for (size_t blocks : {1, 2, 31, 32, 33}) {
    // Float types also get a length that is no multiple of 8 (scalar tail).
    const size_t n = blocks * block + (is_float && blocks == 2 ? 3 : 0);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(kActRows * n);
    for (size_t r = 0; r < kActRows; ++r) {
      const float scale = std::pow(10.0f, static_cast<float>(r) - 2.0f);  // rows of very different size
      for (size_t i = 0; i < n; ++i) x[r * n + i] = scale * normal(rng);
    }
    const size_t act_row = activation_row_bytes(format, n);
    std::vector<uint8_t> act(act_row * kActRows), expected_act(act_row * kActRows);
    for (size_t r = 0; r < kActRows; ++r) {
      set.quantize[static_cast<uint32_t>(format)](&x[r * n], &act[r * act_row], n);
      ref::quantize_activation_row(format, &x[r * n], &expected_act[r * act_row], n);
    }
    ++c.checks;
    if (act != expected_act) c.fail(std::string(tc.name) + " activation bytes differ from the reference, n=" + std::to_string(n));
    for (size_t out_rows : {1, 31, 32, 33}) {
      const size_t w_row = static_cast<size_t>(row_bytes(tc.type, n));
      const std::vector<uint8_t> w = random_weights(tc, n, out_rows, rng);
      for (size_t act_rows = 1; act_rows <= kActRows; ++act_rows) {
        std::vector<float> y(act_rows * out_rows);
        set.tile[id](n, w.data(), w_row, out_rows, act.data(), act_row, act_rows, y.data(), out_rows);
        // The same tile in two calls over the output rows (as matmul's
        // thread chunks split it).
        std::vector<float> split(act_rows * out_rows);
        const size_t half = out_rows / 2;
        if (half > 0) set.tile[id](n, w.data(), w_row, half, act.data(), act_row, act_rows, split.data(), out_rows);
        set.tile[id](n, w.data() + half * w_row, w_row, out_rows - half, act.data(), act_row, act_rows,
                     split.data() + half, out_rows);
        for (size_t r = 0; r < act_rows; ++r) {
          for (size_t o = 0; o < out_rows; ++o) {
            const float got = y[r * out_rows + o];
            const float want = ref::vec_dot(tc.type, n, &w[o * w_row], &act[r * act_row]);
            ++c.checks;
            if (is_float) {
              // Tolerance relative to sum |w x| (the scale of any summation order's rounding).
              std::vector<float> wf(n);
              ref::dequantize_row(tc.type, &w[o * w_row], wf.data(), n);
              double magnitude = 0.0;
              for (size_t i = 0; i < n; ++i) magnitude += std::fabs(static_cast<double>(wf[i]) * x[r * n + i]);
              if (!(std::fabs(static_cast<double>(got) - want) <= 1e-5 * magnitude + 1e-30)) {
                c.fail(where(tc, n, out_rows, act_rows) + " output " + std::to_string(o) + " row " +
                       std::to_string(r) + ": " + std::to_string(got) + " vs reference " + std::to_string(want));
              }
            } else if (!same_bits(got, want)) {
              c.fail(where(tc, n, out_rows, act_rows) + " output " + std::to_string(o) + " row " +
                     std::to_string(r) + ": " + std::to_string(got) + " vs reference " + std::to_string(want));
            }
            // Batch invariance: the row alone, and the split tile.
            float alone = 0.0f;
            set.tile[id](n, &w[o * w_row], w_row, 1, &act[r * act_row], act_row, 1, &alone, 1);
            ++c.checks;
            if (!same_bits(got, alone) || !same_bits(got, split[r * out_rows + o])) {
              c.fail(where(tc, n, out_rows, act_rows) + " output " + std::to_string(o) + " row " +
                     std::to_string(r) + " depends on the rows computed with it");
            }
          }
        }
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: kernel_driver <isa | detect>\n");
    return 2;
  }
  const std::string arg = argv[1];
  if (arg == "detect") {
    for (cpu::Isa isa : cpu::kAllIsas) {
      if (cpu::isa_supported(isa)) std::printf("%s\n", cpu::isa_name(isa));
    }
    std::printf("best %s\n", cpu::isa_name(cpu::best_isa()));
    return 0;
  }
  try {
    const cpu::KernelSet& set = cpu::kernel_set(cpu::parse_isa(arg.c_str()));
    Checker checker{argv[1]};
    std::mt19937 rng(12345);
    for (const TypeCase& tc : type_cases()) {
      if (set.tile[static_cast<uint32_t>(tc.type)] == nullptr) {
        checker.fail(std::string("no kernel for ") + tc.name);
        continue;
      }
      check_type(set, tc, checker, rng);
    }
    std::printf("%s: %d checks, %d failures\n", argv[1], checker.checks, checker.failures);
    return checker.failures == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::printf("error: %s\n", e.what());
    return 3;
  }
}
