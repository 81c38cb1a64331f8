// The most a CPU's cores can read from memory, for the decode cells of issue 11: a decode step reads every weight
// once, so bytes per step / this figure is the fastest step any program can take at that thread count.
//
//   gcc -O2 -march=native -fopenmp benchmarks/device/read_bandwidth.c -o /tmp/read_bandwidth
//   /tmp/read_bandwidth [GiB=2] [threads=1,2,4,8,16]
//
// Each thread first-touches and then reads its own contiguous slice (as a gemv task reads its rows), with 512-bit
// (or 256-bit) loads OR-ed together so the loads cannot be skipped; the best of 5 passes is printed.
#include <immintrin.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AVX512F__)
typedef __m512i vec;
#define VEC_ZERO() _mm512_setzero_si512()
#define VEC_LOAD(p) _mm512_load_si512((const void*)(p))
#define VEC_OR(a, b) _mm512_or_si512(a, b)
#define VEC_FOLD(v) ((uint64_t)_mm512_reduce_or_epi64(v))
#else
typedef __m256i vec;
#define VEC_ZERO() _mm256_setzero_si256()
#define VEC_LOAD(p) _mm256_load_si256((const __m256i*)(p))
#define VEC_OR(a, b) _mm256_or_si256(a, b)
#define VEC_FOLD(v) ((uint64_t)_mm256_extract_epi64(v, 0) | (uint64_t)_mm256_extract_epi64(v, 3))
#endif

static uint64_t read_slice(const char* p, size_t bytes) {
  vec a = VEC_ZERO(), b = VEC_ZERO(), c = VEC_ZERO(), d = VEC_ZERO();
  const size_t step = 4 * sizeof(vec);
  for (size_t i = 0; i + step <= bytes; i += step) {
    a = VEC_OR(a, VEC_LOAD(p + i));
    b = VEC_OR(b, VEC_LOAD(p + i + sizeof(vec)));
    c = VEC_OR(c, VEC_LOAD(p + i + 2 * sizeof(vec)));
    d = VEC_OR(d, VEC_LOAD(p + i + 3 * sizeof(vec)));
  }
  return VEC_FOLD(VEC_OR(VEC_OR(a, b), VEC_OR(c, d)));
}

static double run(char* buf, size_t bytes, int threads) {
  const size_t slice = bytes / (size_t)threads / 4096 * 4096;
  double best = 0.0;
  volatile uint64_t sink = 0;
  for (int pass = 0; pass < 5; ++pass) {
    const double t0 = omp_get_wtime();
    uint64_t acc = 0;
#pragma omp parallel num_threads(threads) reduction(| : acc)
    acc |= read_slice(buf + (size_t)omp_get_thread_num() * slice, slice);
    const double t = omp_get_wtime() - t0;
    sink |= acc;
    const double gbs = (double)slice * threads / t / 1e9;
    if (gbs > best) best = gbs;
  }
  (void)sink;
  return best;
}

int main(int argc, char** argv) {
  const double gib = argc > 1 ? atof(argv[1]) : 2.0;
  const char* list = argc > 2 ? argv[2] : "1,2,4,8,16";
  const size_t bytes = (size_t)(gib * (1 << 30)) / 4096 * 4096;
  char* buf = aligned_alloc(4096, bytes);
  if (buf == NULL) {
    fprintf(stderr, "read_bandwidth: cannot allocate %.1f GiB\n", gib);
    return 1;
  }
  printf("threads | read GB/s (best of 5 passes over %.1f GiB)\n", gib);
  char* copy = strdup(list);
  for (char* tok = strtok(copy, ","); tok != NULL; tok = strtok(NULL, ",")) {
    const int threads = atoi(tok);
    if (threads < 1) continue;
    const size_t slice = bytes / (size_t)threads / 4096 * 4096;
    // First touch by the thread that reads the slice, so its pages sit on that thread's memory node.
#pragma omp parallel num_threads(threads)
    memset(buf + (size_t)omp_get_thread_num() * slice, omp_get_thread_num() + 1, slice);
    printf("%7d | %8.1f\n", threads, run(buf, bytes, threads));
  }
  free(copy);
  free(buf);
  return 0;
}
