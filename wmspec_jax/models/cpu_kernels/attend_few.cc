// Softmax attention of a few queries per row over a layer's KV cache, for XLA:CPU (an XLA FFI custom
// call; wmspec_jax/models/attention_kernel.py documents it, wmspec_jax/models/cpu_kernels builds it).
//
// Why: XLA:CPU computes a decode step's attention as a loop over cache blocks whose keys and values it
// first copies into the dot's layout; at batch 1 that costs more than reading the cache. Here each
// query reads the keys and values of the slots it sees where they lie, [B, S, Hkv, Dh].
//
// What: q [B, T, H, Dh] (RoPE applied), keys and values [B, S, Hkv, Dh] (holding this call's tokens),
// positions [B, T]; the query at position p sees the slots (p - window, p] (window >= S: all up to p).
// A token tree (attribute tree) adds the ancestors rule of wmspec_jax/models/attention.py: the slots
// below base[b] within the window, and slot base[b] + j where ancestors[t, j]. For each query and head:
// scores q.k * scale (soft-capped: cap * tanh(s / cap)), a softmax over its visible slots taken in
// ascending order (the maximum first, then exp and one running sum), and the values' weighted sum over
// that sum. A query that sees no slot gets 0. Each output is computed alone in that order, so a query's
// result does not depend on the other queries, rows or T of the call: the same bits in a decode step
// and in a verification pass. A NaN key's score makes the query's output NaN.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "parallel.h"

namespace ffi = xla::ffi;

namespace {

constexpr int64_t kParallelWork = 1 << 17;  // multiply-adds below which the calling thread works alone

inline float Dot(const float* a, const float* b, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
  float t = wmspec::LaneSum(acc);
  for (; i < n; ++i) t = std::fma(a[i], b[i], t);
  return t;
}

struct Shape {
  int64_t b, t, h, s, hkv, dh, group;  // group: query heads per key / value head
};

struct Rule {
  int64_t window;  // >= S: every slot up to the position
  float scale, softcap;  // softcap 0: none
  bool tree;
};

// The visible slots of query (row, i) in ascending order, into `slots`.
void VisibleSlots(const Shape& sh, const Rule& rule, const int32_t* positions, const int32_t* base,
                  const int32_t* ancestors, int64_t row, int64_t i, std::vector<int64_t>& slots) {
  slots.clear();
  const int64_t pos = positions[row * sh.t + i];
  const int64_t lo = rule.window < sh.s ? std::max<int64_t>(0, pos - rule.window + 1) : 0;
  if (!rule.tree) {
    for (int64_t s = lo, hi = std::min<int64_t>(pos, sh.s - 1); s <= hi; ++s) slots.push_back(s);
    return;
  }
  const int64_t first_node = base[row];
  for (int64_t s = lo, hi = std::min<int64_t>(first_node - 1, sh.s - 1); s <= hi; ++s) slots.push_back(s);
  for (int64_t j = 0; j < sh.t; ++j) {
    const int64_t s = first_node + j;
    if (s >= 0 && s < sh.s && ancestors[i * sh.t + j]) slots.push_back(s);
  }
}

// Every head of key / value head g for query (row, i).
void AttendGroup(const Shape& sh, const Rule& rule, const float* q, const float* keys, const float* values,
                 const std::vector<int64_t>& slots, int64_t row, int64_t i, int64_t g, float* out,
                 std::vector<float>& scores) {
  const int64_t n = static_cast<int64_t>(slots.size());
  scores.resize(n);
  for (int64_t head = g * sh.group; head < (g + 1) * sh.group; ++head) {
    const float* qh = q + ((row * sh.t + i) * sh.h + head) * sh.dh;
    float* oh = out + ((row * sh.t + i) * sh.h + head) * sh.dh;
    float top = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < n; ++j) {
      float score = Dot(qh, keys + ((row * sh.s + slots[j]) * sh.hkv + g) * sh.dh, sh.dh) * rule.scale;
      if (rule.softcap > 0.0f) score = std::tanh(score / rule.softcap) * rule.softcap;
      scores[j] = score;
      top = score > top ? score : top;
    }
    const float shift = std::isinf(top) && top < 0 ? 0.0f : top;
    for (int64_t d = 0; d < sh.dh; ++d) oh[d] = 0.0f;
    float total = 0.0f;
    for (int64_t j = 0; j < n; ++j) {
      const float p = std::exp(scores[j] - shift);
      total += p;
      const float* v = values + ((row * sh.s + slots[j]) * sh.hkv + g) * sh.dh;
      for (int64_t d = 0; d < sh.dh; ++d) oh[d] = std::fma(p, v[d], oh[d]);
    }
    // a NaN score has made total and oh NaN already; no visible slot leaves 0 / 1
    const float divisor = total > 0.0f ? total : 1.0f;
    for (int64_t d = 0; d < sh.dh; ++d) oh[d] = oh[d] / divisor;
  }
}

ffi::Error AttendFew(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> q, ffi::Buffer<ffi::F32> keys,
                     ffi::Buffer<ffi::F32> values, ffi::Buffer<ffi::S32> positions, ffi::Buffer<ffi::S32> base,
                     ffi::Buffer<ffi::S32> ancestors, ffi::ResultBuffer<ffi::F32> out, int64_t window,
                     float scale, float softcap, bool tree) {
  auto qd = q.dimensions(), kd = keys.dimensions(), vd = values.dimensions();
  if (qd.size() != 4 || kd.size() != 4 || vd.size() != 4 || kd[0] != qd[0] || kd[3] != qd[3] ||
      qd[2] % kd[2] != 0 || !std::equal(kd.begin(), kd.end(), vd.begin())) {
    return ffi::Error::InvalidArgument("attend_few: q must be [B, T, H, Dh] and the cache [B, S, Hkv, Dh]");
  }
  const Shape sh{qd[0], qd[1], qd[2], kd[1], kd[2], qd[3], qd[2] / kd[2]};
  const Rule rule{window, scale, softcap, tree};
  const float* qp = q.typed_data();
  const float* kp = keys.typed_data();
  const float* vp = values.typed_data();
  const int32_t* pp = positions.typed_data();
  const int32_t* bp = base.typed_data();
  const int32_t* ap = ancestors.typed_data();
  float* op = out->typed_data();
  const int64_t units = sh.b * sh.t * sh.hkv;  // one unit: the heads of one query sharing a key head
  auto unit = [sh, rule, qp, kp, vp, pp, bp, ap, op](int64_t u) {
    std::vector<int64_t> slots;
    std::vector<float> scores;
    const int64_t g = u % sh.hkv, i = (u / sh.hkv) % sh.t, row = u / (sh.hkv * sh.t);
    VisibleSlots(sh, rule, pp, bp, ap, row, i, slots);
    AttendGroup(sh, rule, qp, kp, vp, slots, row, i, g, op, scores);
  };
  int64_t seen = 0;  // the most slots a query sees (an upper bound)
  for (int64_t u = 0; u < sh.b * sh.t; ++u) {
    seen = std::max<int64_t>(seen, std::min<int64_t>({pp[u] + 1 + (tree ? sh.t : 0), window, sh.s}));
  }
  const int64_t work = units * sh.group * seen * sh.dh * 2;
  wmspec::ForEach(pool, units, work < kParallelWork, unit);
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(WmspecAttendFew, AttendFew,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Attr<int64_t>("window")
                                  .Attr<float>("scale")
                                  .Attr<float>("softcap")
                                  .Attr<bool>("tree"));
