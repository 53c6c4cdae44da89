// SynthID's tournament (Eq. (3) of the paper; Dathathri et al. 2024) over packed g-values, for XLA:CPU
// (an XLA FFI custom call; wmspec_jax/decoders/synthid_scheme.py documents it, wmspec_jax/models/
// cpu_kernels builds it).
//
// Why: XLA:CPU runs the m layers as a loop of a masked sum and an update, several times the cost of one
// pass per layer over the built-in target's 49,152 tokens (docs/performance.md), and a speculative step
// of Alg. 1 takes several tournaments. Here each layer is one pass that updates the distribution and sums
// the next layer's mass in the same loop.
//
// What: probs [N, C], words [N, C, 1] (bit l of the word is g_l, m <= 32); out [N, C] with, for l = 0 .. m-1,
// p <- p (1 + g_l - M_l), M_l the mass of the tokens with g_l = 1. Each M_l is summed over the candidates
// in a fixed order (eight lanes over c = 0, 8, 16, ... then the lanes pairwise, then the tail in order),
// each row alone.
#include <cstdint>

#include "parallel.h"

namespace ffi = xla::ffi;

namespace {

constexpr int64_t kParallelWork = 1 << 20;  // candidate-layers below which the calling thread works alone

inline uint32_t Bit(const uint32_t* words, int64_t c, int64_t layer) { return (words[c] >> layer) & 1u; }

// The g-values of layer `shift` of 8 candidates as a mask.
inline __m256 Won(const uint32_t* words, int64_t c, __m128i shift) {
  const __m256i one = _mm256_set1_epi32(1);
  __m256i bits = _mm256_and_si256(
      _mm256_srl_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(words + c)), shift), one);
  return _mm256_castsi256_ps(_mm256_cmpeq_epi32(bits, one));
}

// The mass of the tokens with g_layer = 1 (the fixed order of the header).
float Mass(const float* p, const uint32_t* words, int64_t n, int64_t layer) {
  const __m128i shift = _mm_cvtsi32_si128(static_cast<int>(layer));
  __m256 acc = _mm256_setzero_ps();
  int64_t c = 0;
  for (; c + 8 <= n; c += 8) acc = _mm256_add_ps(acc, _mm256_and_ps(Won(words, c, shift), _mm256_loadu_ps(p + c)));
  float total = wmspec::LaneSum(acc);
  for (; c < n; ++c) total += Bit(words, c, layer) ? p[c] : 0.0f;
  return total;
}

// One row: each pass applies layer l and sums layer l + 1's mass in the order of Mass.
void OneRow(const float* probs, const uint32_t* words, float* p, int64_t n, int64_t layers) {
  for (int64_t c = 0; c < n; ++c) p[c] = probs[c];
  float mass = layers > 0 ? Mass(p, words, n, 0) : 0.0f;
  for (int64_t layer = 0; layer < layers; ++layer) {
    const float won = 2.0f - mass, lost = 1.0f - mass;
    const __m256 won8 = _mm256_set1_ps(won), lost8 = _mm256_set1_ps(lost);
    const __m128i shift = _mm_cvtsi32_si128(static_cast<int>(layer));
    const __m128i shift_next = _mm_cvtsi32_si128(static_cast<int>(layer + 1));
    __m256 acc = _mm256_setzero_ps();
    int64_t c = 0;
    for (; c + 8 <= n; c += 8) {
      __m256 updated = _mm256_mul_ps(_mm256_loadu_ps(p + c), _mm256_blendv_ps(lost8, won8, Won(words, c, shift)));
      _mm256_storeu_ps(p + c, updated);
      acc = _mm256_add_ps(acc, _mm256_and_ps(Won(words, c, shift_next), updated));
    }
    const int64_t tail = c;
    for (; c < n; ++c) p[c] = p[c] * (Bit(words, c, layer) ? won : lost);
    if (layer + 1 < layers) {
      mass = wmspec::LaneSum(acc);
      for (c = tail; c < n; ++c) mass += Bit(words, c, layer + 1) ? p[c] : 0.0f;
    }
  }
}

ffi::Error Tournament(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> probs, ffi::Buffer<ffi::U32> words,
                      ffi::ResultBuffer<ffi::F32> out, int64_t num_layers) {
  auto pd = probs.dimensions(), wd = words.dimensions();
  if (pd.size() != 2 || wd.size() != 3 || wd[0] != pd[0] || wd[1] != pd[1] || wd[2] != 1 || num_layers > 32) {
    return ffi::Error::InvalidArgument("tournament: probs must be [N, C] and words [N, C, 1], with m <= 32");
  }
  const int64_t rows = pd[0], n = pd[1];
  const float* pp = probs.typed_data();
  const uint32_t* wp = words.typed_data();
  float* op = out->typed_data();
  wmspec::ForEach(pool, rows, rows * n * num_layers < kParallelWork,
                  [pp, wp, op, n, num_layers](int64_t r) { OneRow(pp + r * n, wp + r * n, op + r * n, n, num_layers); });
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(WmspecTournament, Tournament,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::U32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Attr<int64_t>("num_layers"));
