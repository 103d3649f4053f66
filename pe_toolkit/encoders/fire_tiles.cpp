// FIRE's bias on the tiles of the tiled attention: the MLP as a piecewise-linear function of its input.
//
// FIRE (Li et al. 2023, arXiv:2310.04418): b[h, i, j] = f_h(x), x = psi(i - j) / psi(max(i, |L|)), f a ReLU MLP
// 1 -> U -> H. Between consecutive kinks t_0 < ... < t_{m-1} of its hidden units f_h is a line A[h, s] + B[h, s] x
// (segment s = the number of kinks below x). With contiguous positions x along a row of a tile falls to 0 at the
// query's own position and rises after it, so each row is a few runs of one segment, found by binary search on the
// row's x; each run is one vectorised line per head (forward) or three sums per head (backward). The cost per pair
// does not grow with the number of units, unlike evaluating the units pair by pair.
//
// Tables (built once per call in Python, fire_tiles.py):
//   nrev[k] = log1p(|c| |delta|), urev[k] = |delta| / (1 + |c| |delta|), delta = delta_max - k
//   inv_d[i] = 1 / (log1p(|c| max(pos_i, |L|)) + eps) per query index i (padded rows included)
// A tile's row r (query index i0 + r) and column c (key index j0 + c) read k = offset - r + c, offset =
// delta_max - (i0 + q_shift - j0), where q_shift = q_pos[0] - k_pos[0]; the column of delta = 0 is r + (i0 +
// q_shift - j0).
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace {

// Runs of one segment along a row whose x is non-increasing on [0, split) and non-decreasing on [split, cols).
// Calls run(start, stop, segment) for each, in order.
template <typename scalar_t, typename F>
void for_each_run(const scalar_t* x, int64_t cols, int64_t split, const scalar_t* kinks, int64_t m, F run) {
  auto segment = [&](scalar_t v) {  // number of kinks strictly below v
    return static_cast<int64_t>(std::lower_bound(kinks, kinks + m, v) - kinks);
  };
  int64_t c = 0;
  while (c < split) {  // x falls: the segment steps down at the first column with x <= kinks[s - 1]
    const int64_t s = segment(x[c]);
    int64_t stop = split;
    if (s > 0) {
      const scalar_t below = kinks[s - 1];
      int64_t lo = c + 1, hi = split;
      while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (x[mid] <= below) hi = mid; else lo = mid + 1;
      }
      stop = lo;
    }
    run(c, stop, s);
    c = stop;
  }
  while (c < cols) {  // x rises: the segment steps up at the first column with x > kinks[s]
    const int64_t s = segment(x[c]);
    int64_t stop = cols;
    if (s < m) {
      const scalar_t above = kinks[s];
      int64_t lo = c + 1, hi = cols;
      while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (x[mid] > above) hi = mid; else lo = mid + 1;
      }
      stop = lo;
    }
    run(c, stop, s);
    c = stop;
  }
}

template <typename scalar_t>
void row_inputs(const scalar_t* table, int64_t k0, scalar_t scale, int64_t cols, scalar_t* out) {
  const scalar_t* t = table + k0;
#pragma omp simd
  for (int64_t c = 0; c < cols; ++c) out[c] = t[c] * scale;
}

int64_t split_of(int64_t r, int64_t zero_shift, int64_t cols) {
  return std::clamp<int64_t>(r + zero_shift + 1, 0, cols);  // columns up to the query's own position fall
}

}  // namespace

namespace {

template <typename scalar_t>
void tile_bias_kernel(const scalar_t* n, const scalar_t* inv, const scalar_t* kk, int64_t m, const scalar_t* pa,
                      const scalar_t* pb, int64_t heads, scalar_t* po, int64_t i0, int64_t offset,
                      int64_t zero_shift, int64_t rows, int64_t cols) {
  const int64_t segments = m + 1;
  at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
    std::vector<scalar_t> x(cols);
    for (int64_t r = begin; r < end; ++r) {
      row_inputs(n, offset - r, inv[i0 + r], cols, x.data());
      const scalar_t* xr = x.data();
      for_each_run(xr, cols, split_of(r, zero_shift, cols), kk, m, [&](int64_t c0, int64_t c1, int64_t s) {
        for (int64_t h = 0; h < heads; ++h) {
          const scalar_t ah = pa[h * segments + s], bh = pb[h * segments + s];
          scalar_t* o = po + (h * rows + r) * cols;
#pragma omp simd
          for (int64_t c = c0; c < c1; ++c) o[c] = ah + bh * xr[c];
        }
      });
    }
  });
}

template <typename scalar_t>
void tile_statistics_kernel(const scalar_t* g, const scalar_t* n, const scalar_t* un, const scalar_t* inv,
                            const scalar_t* rc, const scalar_t* rl, const scalar_t* kk, int64_t m, double* st,
                            int64_t heads, int64_t rows, int64_t cols, int64_t i0, int64_t offset,
                            int64_t zero_shift) {
  const int64_t segments = m + 1;
  // threads split the heads (each writes its own statistics); a row's inputs are computed once per thread
  at::parallel_for(0, heads, 1, [&](int64_t h0, int64_t h1) {
    std::vector<scalar_t> x(cols), u(cols);
    for (int64_t r = 0; r < rows; ++r) {
      row_inputs(n, offset - r, inv[i0 + r], cols, x.data());
      row_inputs(un, offset - r, inv[i0 + r], cols, u.data());
      const scalar_t* xr = x.data();
      const scalar_t* ur = u.data();
      const double row_c = rc[i0 + r], row_l = rl[i0 + r];
      for_each_run(xr, cols, split_of(r, zero_shift, cols), kk, m, [&](int64_t c0, int64_t c1, int64_t s) {
        for (int64_t h = h0; h < h1; ++h) {
          const scalar_t* gr = g + (h * rows + r) * cols;
          scalar_t a0 = 0, a1 = 0, au = 0;
#pragma omp simd reduction(+ : a0, a1, au)
          for (int64_t c = c0; c < c1; ++c) {
            a0 += gr[c];
            a1 += gr[c] * xr[c];
            au += gr[c] * ur[c];
          }
          st[(0 * heads + h) * segments + s] += a0;
          st[(1 * heads + h) * segments + s] += a1;
          st[(2 * heads + h) * segments + s] += au;
          st[(3 * heads + h) * segments + s] += a1 * row_c;
          st[(4 * heads + h) * segments + s] += a1 * row_l;
        }
      });
    }
  });
}

}  // namespace

// bias (H, rows, cols) of one tile. kinks (m,), a and b (H, m + 1): the lines per segment.
torch::Tensor tile_bias(torch::Tensor nrev, torch::Tensor inv_d, torch::Tensor kinks, torch::Tensor a,
                        torch::Tensor b, int64_t i0, int64_t offset, int64_t zero_shift, int64_t rows,
                        int64_t cols) {
  const int64_t heads = a.size(0), m = kinks.size(0);
  TORCH_CHECK(a.size(1) == m + 1 && b.size(1) == m + 1, "tile_bias: lines must have one more entry than kinks");
  auto out = torch::empty({heads, rows, cols}, nrev.options());
  AT_DISPATCH_FLOATING_TYPES(nrev.scalar_type(), "fire_tile_bias", [&] {
    tile_bias_kernel<scalar_t>(nrev.data_ptr<scalar_t>(), inv_d.data_ptr<scalar_t>(), kinks.data_ptr<scalar_t>(), m,
                               a.data_ptr<scalar_t>(), b.data_ptr<scalar_t>(), heads, out.data_ptr<scalar_t>(), i0,
                               offset, zero_shift, rows, cols);
  });
  return out;
}

// Sums of one tile's score gradients ds (H, rows, cols) per head and segment, float64 (5, H, m + 1):
// [sum ds, sum ds x, sum ds u, sum ds x row_c, sum ds x row_l], u = d x / d|c| along psi(i - j) (urev * inv_d),
// row_c and row_l the per-query factors of x's derivative through its normaliser (fire_tiles.py).
torch::Tensor tile_statistics(torch::Tensor ds, torch::Tensor nrev, torch::Tensor urev, torch::Tensor inv_d,
                              torch::Tensor row_c, torch::Tensor row_l, torch::Tensor kinks, int64_t i0,
                              int64_t offset, int64_t zero_shift) {
  const int64_t heads = ds.size(0), rows = ds.size(1), cols = ds.size(2), m = kinks.size(0);
  auto stats = torch::zeros({5, heads, m + 1}, ds.options().dtype(torch::kFloat64));
  AT_DISPATCH_FLOATING_TYPES(ds.scalar_type(), "fire_tile_statistics", [&] {
    tile_statistics_kernel<scalar_t>(ds.data_ptr<scalar_t>(), nrev.data_ptr<scalar_t>(), urev.data_ptr<scalar_t>(),
                                     inv_d.data_ptr<scalar_t>(), row_c.data_ptr<scalar_t>(),
                                     row_l.data_ptr<scalar_t>(), kinks.data_ptr<scalar_t>(), m,
                                     stats.data_ptr<double>(), heads, rows, cols, i0, offset, zero_shift);
  });
  return stats;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) {
  module.def("tile_bias", &tile_bias, "FIRE's bias on one tile, by runs of one MLP segment");
  module.def("tile_statistics", &tile_statistics, "Score-gradient sums per head and MLP segment of one tile");
}
