// Products of a few activation rows with a weight matrix stored [out, in], for XLA:CPU (an XLA FFI
// custom call; wmspec_jax/models/rows_matmul.py builds, loads and documents it).
//
// Why: XLA:CPU computes y = x w^T with one thread, and for 2-8 rows of x (a verification pass, a
// small batch) its library kernels read the weights at about half the speed of the one-row product.
// Here each weight row is read from memory once for all rows of x, and the output rows are split
// over XLA's intra-op thread pool.
//
// Every output element is the same sum in the same order whatever the number of rows, the row
// group it falls in or the thread that computes it: two sets of eight lanes accumulate the chunks
// in = 0, 16, 32, ... and 8, 24, 40, ... (fused multiply-adds; an odd last chunk goes to the first),
// the two are added, the lanes are added pairwise, then the tail in order. A row's result is
// therefore bit for bit the same in a one-token decode step and in a K + 1-token verification pass.
#include <cmath>
#include <cstdint>
#include <vector>

#include "parallel.h"

namespace ffi = xla::ffi;
using wmspec::LaneSum;

namespace {

// Rows of x are taken two at a time, and every pair passes over a tile of 4 weight rows, which stays in L1
// after the first pair: with four rows at a time (8 accumulators), products of 3-4 rows streamed the
// weights 10-30 % slower (python -m benchmarks.stream_products).
constexpr int64_t kGroup = 2;
constexpr int64_t kTile = 4;
constexpr int64_t kParallelBytes = 1 << 18;   // smaller matrices run on the calling thread alone
constexpr int64_t kChunksPerThread = 4;

// Weight row o against M rows of x. Each output has two accumulators, one for the 8-float chunks at
// in = 0, 16, 32, ... and one for those at 8, 24, 40, ...: twice the independent fused multiply-add
// chains, so the products are not bound by the instruction's latency. One weight row at a time:
// the weights are read as one sequential stream per thread (with 3-4 rows interleaved, as blocks of
// several weight rows did, the stream ran 20-60 % slower: python -m benchmarks.stream_products).
template <int M>
inline void Row(const float* __restrict w, const float* __restrict x, float* __restrict y, int64_t in,
                int64_t out, int64_t o) {
  __m256 even[M], odd[M];
#pragma GCC unroll 16
  for (int m = 0; m < M; ++m) even[m] = odd[m] = _mm256_setzero_ps();
  const float* wo = w + o * in;
  int64_t i = 0;
  for (; i + 16 <= in; i += 16) {
    __m256 w0 = _mm256_loadu_ps(wo + i), w1 = _mm256_loadu_ps(wo + i + 8);
#pragma GCC unroll 16
    for (int m = 0; m < M; ++m) {
      even[m] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + m * in + i), even[m]);
      odd[m] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + m * in + i + 8), odd[m]);
    }
  }
  const bool one_more = i + 8 <= in;  // a last 8-float chunk goes to the even accumulator
  for (int m = 0; m < M; ++m) {
    __m256 e = even[m];
    if (one_more) e = _mm256_fmadd_ps(_mm256_loadu_ps(wo + i), _mm256_loadu_ps(x + m * in + i), e);
    float t = LaneSum(_mm256_add_ps(e, odd[m]));
    for (int64_t j = one_more ? i + 8 : i; j < in; ++j) t = std::fma(wo[j], x[m * in + j], t);
    y[m * out + o] = t;
  }
}

// Weight rows [o0, o1) (at most kTile) against M rows of x.
template <int M>
inline void Rows(const float* w, const float* x, float* y, int64_t in, int64_t out, int64_t o0, int64_t o1) {
  for (int64_t o = o0; o < o1; ++o) Row<M>(w, x, y, in, out, o);
}

void Range(const float* w, const float* x, float* y, int64_t rows, int64_t in, int64_t out, int64_t o0,
           int64_t o1) {
  for (int64_t t0 = o0; t0 < o1; t0 += kTile) {
    int64_t t1 = t0 + kTile < o1 ? t0 + kTile : o1;
    for (int64_t r = 0; r < rows; r += kGroup) {
      const float* xr = x + r * in;
      float* yr = y + r * out;
      if (rows - r == 1) {
        Rows<1>(w, xr, yr, in, out, t0, t1);
      } else {
        Rows<2>(w, xr, yr, in, out, t0, t1);
      }
    }
  }
}

struct Chunk {
  const float* w;
  float* y;
  int64_t in, out, o0, o1;
};

// y_j = x w_j^T for every matrix w_j [out_j, in] of the call (one call for products that share their
// input: a layer's q, k and v, or its gate and up), so the pool is woken once for all of them.
ffi::Error RowsMatmul(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x, ffi::RemainingArgs weights,
                      ffi::RemainingRets outputs) {
  auto xd = x.dimensions();
  if (xd.size() != 2 || weights.size() == 0 || weights.size() != outputs.size()) {
    return ffi::Error::InvalidArgument("rows_matmul: x must be [rows, in], with one output per weight");
  }
  const int64_t rows = xd[0], in = xd[1];
  const float* xp = x.typed_data();
  const int64_t threads = pool.num_threads();
  int64_t total = 0;
  std::vector<Chunk> whole;
  for (size_t j = 0; j < weights.size(); ++j) {
    auto w = weights.get<ffi::Buffer<ffi::F32>>(j);
    auto y = outputs.get<ffi::Buffer<ffi::F32>>(j);
    if (!w.has_value() || !y.has_value()) return ffi::Error::InvalidArgument("rows_matmul: float32 buffers only");
    auto wd = w->dimensions();
    if (wd.size() != 2 || wd[1] != in) return ffi::Error::InvalidArgument("rows_matmul: every w must be [out, in]");
    whole.push_back(Chunk{w->typed_data(), (*y)->typed_data(), in, wd[0], 0, wd[0]});
    total += wd[0] * in;
  }
  if (threads <= 1 || total * 4 < kParallelBytes) {
    for (const Chunk& c : whole) Range(c.w, xp, c.y, rows, c.in, c.out, c.o0, c.o1);
    return ffi::Error::Success();
  }
  // about kChunksPerThread chunks per thread over all matrices, each a multiple of kTile rows
  const int64_t target = threads * kChunksPerThread;
  auto chunks = std::make_shared<std::vector<Chunk>>();
  for (const Chunk& c : whole) {
    int64_t pieces = (c.out * c.in * target + total - 1) / total;
    if (pieces < 1) pieces = 1;
    const int64_t per = ((c.out + pieces - 1) / pieces + kTile - 1) / kTile * kTile;
    for (int64_t o0 = 0; o0 < c.out; o0 += per) {
      chunks->push_back(Chunk{c.w, c.y, c.in, c.out, o0, o0 + per < c.out ? o0 + per : c.out});
    }
  }
  wmspec::ParallelFor(pool, static_cast<int64_t>(chunks->size()), [chunks, xp, rows](int64_t i) {
    const Chunk& c = (*chunks)[i];
    Range(c.w, xp, c.y, rows, c.in, c.out, c.o0, c.o1);
  });
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(WmspecRowsMatmul, RowsMatmul,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .RemainingArgs()
                                  .RemainingRets());
