// Shared by the CPU kernels (wmspec_jax/models/cpu_kernels): a lane sum and a parallel loop over
// XLA:CPU's intra-op thread pool.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "xla/ffi/api/ffi.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#else
#error "the wmspec CPU kernels need AVX2 and FMA (the Python side falls back to XLA without them)"
#endif

namespace wmspec {

// The eight lanes of v added pairwise in a fixed order.
inline float LaneSum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  __m128 s = _mm_add_ps(lo, hi);               // lanes (0+4) (1+5) (2+6) (3+7)
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));      // (0+4)+(2+6), (1+5)+(3+7)
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// fn(i) for every i in [0, n): the calling thread and up to threads - 1 pool tasks claim indices from a
// counter. A task that starts late finds none left, and the caller never waits for an index nobody has
// claimed, so a busy or one-thread pool cannot stall it. The state is shared with the tasks (a late one
// may start after the caller has returned); fn must copy what it needs (pointers into the call's buffers
// are read only while an index is being run, and every index ends before the caller returns).
template <typename F>
void ParallelFor(xla::ffi::ThreadPool& pool, int64_t n, F fn) {
  struct State {
    explicit State(F f, int64_t count) : fn(std::move(f)), n(count) {}
    F fn;
    int64_t n;
    std::atomic<int64_t> next{0};
    std::atomic<int64_t> done{0};
  };
  auto state = std::make_shared<State>(std::move(fn), n);
  auto run = [state]() {
    int64_t i;
    while ((i = state->next.fetch_add(1, std::memory_order_relaxed)) < state->n) {
      state->fn(i);
      state->done.fetch_add(1, std::memory_order_release);
    }
  };
  for (int64_t t = 1; t < pool.num_threads() && t < n; ++t) pool.Schedule([run]() { run(); });
  run();
  while (state->done.load(std::memory_order_acquire) < n) _mm_pause();
}

// fn(i) for every i in [0, n): on the calling thread alone when `alone` (work too small to pay for waking
// the pool) or the pool has one thread, else as ParallelFor.
template <typename F>
void ForEach(xla::ffi::ThreadPool& pool, int64_t n, bool alone, F fn) {
  if (alone || n <= 1 || pool.num_threads() <= 1) {
    for (int64_t i = 0; i < n; ++i) fn(i);
  } else {
    ParallelFor(pool, n, std::move(fn));
  }
}

}  // namespace wmspec
