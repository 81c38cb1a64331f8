// The decode matvec's configs and its plain launches (the kernel:
// matvec_decode_kernel.cuh).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/cuda/matvec_decode_kernel.cuh"
#include "core/env_switch.h"
#include "core/error.h"

namespace muser::cuda {

bool decode_config_exists(const DecodeConfig& c) {
  if (c.lane_rows == 8) return c.warp_rows == 1 && (c.unroll == 1 || c.unroll == 2);
  return c.lane_rows == 1 && ((c.warp_rows == 1 && c.unroll == 1) ||
                              ((c.warp_rows == 2 || c.warp_rows == 4) && (c.unroll == 1 || c.unroll == 2)));
}

namespace {

// Once per process, as MUSER_CUDA_PDL: MUSER_CUDA_DECODE=classic keeps
// every decode matvec on matvec_decode_kernel (for A/B runs).
bool spread_configs_enabled() {
  static const bool enabled = !env_is("MUSER_CUDA_DECODE", "classic");
  return enabled;
}

// Once per process: MUSER_CUDA_DECODE_CONFIG="R:N=W,U,L;..." (A/B runs
// in the engine, where the kernel bench's cold, unchained launches mislead)
// gives matvecs of R rows and exactly N weight rows (all targets together)
// the config W weight rows per warp, U units per lane, L lane rows. An
// entry in another form, or naming a config that does not exist, fails the
// step with InvalidArgument (a typo would otherwise measure the default).
struct ConfigOverride {
  size_t rows, n_out;
  DecodeConfig config;
};

const std::vector<ConfigOverride>& config_overrides() {
  static const std::vector<ConfigOverride> overrides = [] {
    std::vector<ConfigOverride> out;
    const char* spec = std::getenv("MUSER_CUDA_DECODE_CONFIG");
    if (spec == nullptr) return out;
    std::string s(spec);
    size_t at = 0;
    while (at < s.size()) {
      const size_t end = std::min(s.find(';', at), s.size());
      const std::string entry = s.substr(at, end - at);
      ConfigOverride o{};
      o.config.wide = true;
      int consumed = 0;
      if (std::sscanf(entry.c_str(), "%zu:%zu=%d,%d,%d%n", &o.rows, &o.n_out, &o.config.warp_rows, &o.config.unroll,
                      &o.config.lane_rows, &consumed) != 5 ||
          static_cast<size_t>(consumed) != entry.size() || !decode_config_exists(o.config)) {
        std::string existing;
        for (int l : {1, 8}) {
          for (int wr : {1, 2, 4}) {
            for (int un : {1, 2}) {
              if (decode_config_exists({wr, un, true, l})) {
                existing += " " + std::to_string(wr) + "," + std::to_string(un) + "," + std::to_string(l);
              }
            }
          }
        }
        throw InvalidArgument("MUSER_CUDA_DECODE_CONFIG: entry '" + entry +
                              "' is not R:N=W,U,L naming an existing decode config (W,U,L one of" + existing + ")");
      }
      out.push_back(o);
      at = end + 1;
    }
    return out;
  }();
  return overrides;
}

}  // namespace

DecodeConfig decode_config(DType type, size_t n_out, size_t n_rows, bool spread) {
  for (const ConfigOverride& o : config_overrides()) {
    if (o.rows == n_rows && o.n_out == n_out && (spread || o.config.lane_rows == 1)) return o.config;
  }
  // Measured on the H200 (benchmarks/bench_cuda_matvec.py, llama3-8b shapes,
  // Q4_0 and Q4_K): one weight row per warp, one unit at a time, is fastest
  // on small matrices (k/v: 1024 rows) and as fast as any on 4096-row ones
  // at 1..2 rows; two rows per warp with two units each lane in flight wins
  // on the large ones (gate/up, output: 83% of 4.3 TB/s at 1 row against
  // 71%) and on 4096-row ones at 3..4 rows, where sharing each activation
  // load between weight rows starts to count. Q4_K gains from it from 2048
  // rows on and prefers four rows per warp at 3..4 rows. Unrolling one row
  // four units deep was slower everywhere (so that config is gone).
  //
  // Refined from a run of every config per shape (device call s6-1, Q4_0
  // and Q4_K; the other types keep the rule above until measured): one unit
  // per lane in flight beats two on the largest matrices, where many warps
  // already cover the latency: the output projection (128,256 rows) at any
  // row count (Q4_0 1 row 71 us against 80, 4 rows 114 against 127; Q4_K
  // 74 against 98 and 116 against 179), and gate/up together (28,672 rows)
  // at 2..4 rows (Q4_0 4 rows 16 us against 20 per matrix, Q4_K with four
  // rows per warp 17 against 24). Four rows per warp, two units, wins on
  // the 4,096-row matrices at 3..4 rows for Q4_0 (down 22 us against 26,
  // q/o 6.7 against 7.6) and at 2 rows for Q4_K (18 against 19, 5.5
  // against 5.9).
  //
  // Session 9 (device call 2, Q4_0, 4 rows, us per launch): a warp's lanes
  // spread over 8 weight rows, two units each (ops_matvec_spread.cu), beat
  // every other config below 8192 rows: down 20.4 against 28.0 (4 x 2) and
  // 23.7 (1 x 1), q/o 7.0 against 8.1, k/v 4.8 against 6.2. On gate/up and
  // the output matrix it lost (22.2 against 16.1 for 2 x 1; 155 against
  // 114), and at 2 rows everywhere; 4 or 16 rows spread were slower than 8.
  DecodeConfig c;
  c.wide = true;
  const bool q4k = type == DType::Q4_K;
  if (type == DType::Q4_0 && n_rows >= 3 && n_out < 8192 && spread && spread_configs_enabled()) {
    c.lane_rows = 8;
    c.unroll = 2;
    return c;
  }
  if (type == DType::Q4_0 || q4k) {
    if (n_out >= 65536) {
      c.warp_rows = n_rows >= 3 ? 4 : 2;
      return c;
    }
    if (n_out >= 8192 && n_rows >= 2) {
      c.warp_rows = q4k ? 4 : 2;
      return c;
    }
    if (n_out >= 4096 && ((!q4k && n_rows >= 3) || (q4k && n_rows == 2))) {
      c.warp_rows = 4;
      c.unroll = 2;
      return c;
    }
  }
  const size_t large = n_rows <= 2 && !q4k ? 8192 : 2048;
  if (n_out < large) return c;  // 1 x 1
  c.warp_rows = q4k && n_rows >= 3 ? 4 : 2;
  c.unroll = 2;
  return c;
}

void matvec_decode(DType type, const MatvecTarget* targets, size_t count, const ActivationView& x, size_t n_rows,
                   const DecodeConfig& config, void* stream_ptr) {
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  if (n_rows < 1 || n_rows > 4) {
    throw InternalError("[cuda matvec] the decode kernel takes 1..4 rows, got " + std::to_string(n_rows));
  }
  if (count < 1 || count > kMaxDecodeTargets) {
    throw InternalError("[cuda matvec] the decode kernel takes 1.." + std::to_string(kMaxDecodeTargets) +
                        " matrices, got " + std::to_string(count));
  }
  if (!decode_config_exists(config)) {
    throw InvalidArgument("[cuda matvec] no decode kernel with " + std::to_string(config.warp_rows) +
                          " weight rows per warp, " + std::to_string(config.unroll) + " units per lane and " +
                          std::to_string(config.lane_rows) + " weight rows across the lanes");
  }
  if (config.lane_rows > 1) {
    matvec_decode_spread(type, targets, count, x, n_rows, config, stream);
    return;
  }
  bool ok = false;
  const bool typed = dispatch_type(type, [&]<typename T>() {
    switch (n_rows) {
      case 1: ok = launch_config<T, 1>(config, targets, count, x, stream); break;
      case 2: ok = launch_config<T, 2>(config, targets, count, x, stream); break;
      case 3: ok = launch_config<T, 3>(config, targets, count, x, stream); break;
      default: ok = launch_config<T, 4>(config, targets, count, x, stream); break;
    }
  });
  if (!typed || !ok) {
    throw InternalError(std::string("[cuda matvec] no decode kernel for type ") + dtype_info(type).name);
  }
}

}  // namespace muser::cuda
