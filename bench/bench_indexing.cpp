// bench_indexing: advanced indexing and einsum, forward (under NoGradGuard) and
// forward+backward, against PyTorch in the same run (bench/peers/indexing_peer.py):
//   rows_<N>x<D>:    x[idx] for x [N, D], idx N/4 rows (an embedding-like gather; its
//                    backward is an accumulating index_put with repeated rows);
//   cols_<N>x<D>:    x[:, idx] with idx D/2 columns (a strided gather);
//   mask_<N>x<D>:    x[mask] with every other element (nonzero + gather; backward a put);
//   einsum_bmm_<B>:  einsum("bij,bjk->bik") on [B, 128, 64] x [B, 64, 128].
// Index values are (j * 7919) % n on both sides, so both gather the same elements.
//
//   build/bin/bench_indexing [--device cpu|cuda] [--steps 10] [--warmup 2] [--threads N]
//                            [--python PY] [--no-peer]
//
// Timing as bench_pool: CPU median of --steps timed calls; CUDA events (bench/gpu_timing.h).
// f32. Ends with one `result: {json}` line whose "ratios" are
// {"<case>_fwd" | "<case>_fwd_bwd": ember speed / peer speed} (> 1: ember faster).
#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <ember/ember.h>

#include "bench_harness.h"

using namespace ember;

int main(int argc, char** argv) {
  bench::PeerArgs a;
  CLI::App app{"Advanced indexing and einsum forward and backward: ember vs PyTorch"};
  if (const int rc = bench::parse_peer_bench_args(app, a, argc, argv); rc >= 0) return rc;
  const Device dev = a.device();
  using namespace ember::indexing;
  auto spread = [&](int64_t count, int64_t n) {
    std::vector<int64_t> v(static_cast<size_t>(count));
    for (int64_t j = 0; j < count; ++j) v[size_t(j)] = (j * 7919) % n;
    return tensor<int64_t>(v).to(dev);
  };

  std::vector<bench::UnaryCase> cases;
  {
    const int64_t N = 65536, D = 64;
    Tensor idx = spread(N / 4, N);
    cases.push_back({str("rows_", N, "x", D), {N, D}, [idx](const Tensor& x) { return x.index({idx}); }});
  }
  {
    const int64_t N = 1024, D = 1024;
    Tensor idx = spread(D / 2, D);
    cases.push_back({str("cols_", N, "x", D), {N, D}, [idx](const Tensor& x) { return x.index({Slice(), idx}); }});
    Tensor full_mask = zeros({N, D}, TensorOptions(DType::b8).device(dev));
    full_mask.index_put_({Slice(), Slice(None, None, 2)}, true);  // every other column
    cases.push_back({str("mask_", N, "x", D), {N, D}, [full_mask](const Tensor& x) { return x.index({full_mask}); }});
  }
  {
    const int64_t B = 32;
    Tensor w = randn({B, 64, 128}, TensorOptions(DType::f32).device(dev));
    cases.push_back({str("einsum_bmm_", B), {B, 128, 64},
                     [w](const Tensor& x) { return einsum("bij,bjk->bik", {x, w}); }});
  }

  return bench::run_unary_fwd_bwd("indexing", "indexing", "indexing_peer.py", cases, a);
}
