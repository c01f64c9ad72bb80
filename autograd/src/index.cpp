// Differentiable indexing and joining ops: each forward beside its VJP.
// The VJPs are written with differentiable ops (the backward of index_select/embedding is a
// recorded index-add whose own VJP is index_select/embedding again), so double backward
// works. split/chunk are narrow views and stack is unsqueeze + cat: no VJP of their own.
#include <algorithm>

#include "ember/factory.h"
#include "ember/ops/index.h"
#include "ember/random.h"
#include "inplace.h"

namespace ember {

using autograd::needs_input_grad;
using autograd::record;
using autograd::save;

namespace {

// Zeros of `sizes` with g's slices summed in at rows `index` along dim.
Tensor index_select_backward(const Tensor& g, int64_t dim, const Tensor& index, const Shape& sizes) {
  return record("index_select_backward", ops::index_add_into_zeros(g, dim, index, sizes), {g},
                [dim, index = save(index)](const Tensor& gg) -> TensorList {
                  return {index_select(gg, dim, index)};
                });
}

Tensor embedding_backward(const Tensor& g, const Tensor& indices, int64_t num_weights) {
  return record("embedding_backward", ops::embedding_backward(g, indices, num_weights), {g},
                [indices = save(indices)](const Tensor& gg) -> TensorList {
                  return {embedding(gg, indices)};
                });
}

// x * scale where mask is true, 0 elsewhere: linear in x and its own adjoint.
Tensor masked_scale(const Tensor& x, const Tensor& mask, double scale) {
  return record("dropout", ops::masked_scale(x, mask, scale), {x},
                [mask, scale](const Tensor& g) -> TensorList { return {masked_scale(g, mask, scale)}; });
}

// g (of index's shape) zero-padded at the end of each dim up to `sizes`: scatter_add's src
// may be larger than its index, and only the indexed part of src reaches the output.
Tensor pad_to(Tensor g, const Shape& sizes) {
  for (int64_t d = 0; d < g.dim(); ++d) {
    if (g.sizes()[d] == sizes[d]) continue;
    Shape zs = g.sizes();
    zs[d] = sizes[d] - g.sizes()[d];
    g = cat({g, zeros(zs, TensorOptions(g.dtype()).device(g.device()))}, d);
  }
  return g;
}

}  // namespace

// ---- joining ----

Tensor cat(const TensorList& tensors, int64_t dim) {
  Tensor out = ops::cat(tensors, dim);  // validates
  auto ref = std::find_if(tensors.begin(), tensors.end(), [](const Tensor& t) { return !ops::cat_skips(t); });
  if (ref == tensors.end()) return out;
  const int64_t d = wrap_dim(dim, ref->dim(), "cat");
  // (start, length) of each input along d; length -1 for the skipped [0]-shaped inputs.
  std::vector<std::pair<int64_t, int64_t>> parts;
  int64_t at = 0;
  for (const Tensor& t : tensors) {
    const int64_t len = ops::cat_skips(t) ? -1 : t.sizes()[d];
    parts.emplace_back(at, len);
    at += std::max<int64_t>(len, 0);
  }
  Tensor result = record("cat", out, tensors, [d, parts = std::move(parts)](const Tensor& g) -> TensorList {
    TensorList grads;
    for (size_t i = 0; i < parts.size(); ++i) {
      const bool wanted = parts[i].second >= 0 && needs_input_grad(i);
      grads.push_back(wanted ? narrow(g, d, parts[i].first, parts[i].second) : Tensor());
    }
    return grads;
  });
  EMBER_TRACE(result, "cat", tensors, {{"dim", d}});
  return result;
}

Tensor stack(const TensorList& tensors, int64_t dim) {
  EMBER_CHECK(!tensors.empty(), ValueError, "[stack] expects a non-empty list of tensors");
  for (size_t i = 0; i < tensors.size(); ++i) {
    EMBER_CHECK(tensors[i].defined(), ValueError, "[stack] input ", uint64_t(i), " is an undefined tensor");
    EMBER_CHECK(tensors[i].sizes() == tensors[0].sizes(), ShapeError, "[stack] input ", uint64_t(i),
                " has shape ", tensors[i].sizes(), " but input 0 has shape ", tensors[0].sizes(),
                ": stack needs equal shapes");
  }
  const int64_t d = wrap_dim(dim, tensors[0].dim() + 1, "stack");
  TensorList parts;
  parts.reserve(tensors.size());
  for (const Tensor& t : tensors) parts.push_back(unsqueeze(t, d));
  return cat(parts, d);
}

TensorList split(const Tensor& x, int64_t split_size, int64_t dim) {
  ember::detail::check_defined("split", x);
  EMBER_CHECK(x.dim() > 0, ShapeError, "[split] cannot split a 0-d tensor");
  const int64_t d = wrap_dim(dim, x.dim(), "split");
  const int64_t n = x.sizes()[d];
  EMBER_CHECK(split_size >= 0, ValueError, "[split] split_size must be non-negative, got ", split_size);
  EMBER_CHECK(split_size > 0 || n == 0, ValueError, "[split] split_size can be 0 only when dim ",
              d, " has size 0, but it has size ", n);
  // A split_size larger than the dim gives one piece, as in PyTorch.
  const int64_t pieces = split_size == 0 ? 1 : std::max<int64_t>((n + split_size - 1) / split_size, 1);
  TensorList out;
  out.reserve(size_t(pieces));
  for (int64_t i = 0; i < pieces; ++i) {
    const int64_t start = i * split_size;
    out.push_back(narrow(x, d, start, std::min(split_size, n - start)));
  }
  return out;
}

TensorList split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  ember::detail::check_defined("split", x);
  EMBER_CHECK(x.dim() > 0, ShapeError, "[split] cannot split a 0-d tensor");
  const int64_t d = wrap_dim(dim, x.dim(), "split");
  const int64_t n = x.sizes()[d];
  int64_t total = 0;
  for (int64_t s : sizes) {
    EMBER_CHECK(s >= 0, ValueError, "[split] sizes ", Shape(sizes), " contain a negative size");
    total += s;
  }
  EMBER_CHECK(total == n, ValueError, "[split] sizes ", Shape(sizes), " sum to ", total,
              " but dim ", d, " of shape ", x.sizes(), " has size ", n);
  TensorList out;
  out.reserve(sizes.size());
  int64_t start = 0;
  for (int64_t s : sizes) {
    out.push_back(narrow(x, d, start, s));
    start += s;
  }
  return out;
}

TensorList chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  ember::detail::check_defined("chunk", x);
  EMBER_CHECK(chunks > 0, ValueError, "[chunk] chunks must be positive, got ", chunks);
  EMBER_CHECK(x.dim() > 0, ShapeError, "[chunk] cannot chunk a 0-d tensor");
  const int64_t d = wrap_dim(dim, x.dim(), "chunk");
  const int64_t n = x.sizes()[d];
  const int64_t split_size = (n + chunks - 1) / chunks;
  // An empty dim still gives `chunks` (empty) pieces; otherwise pieces of split_size (the
  // last smaller), which can be fewer than chunks, as in PyTorch.
  if (n == 0) return split(x, std::vector<int64_t>(size_t(chunks), 0), d);
  return split(x, split_size, d);
}

// ---- indexing ----

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  Tensor out = ops::index_select(x, dim, index);  // validates
  const int64_t d = wrap_dim(dim, x.dim(), "index_select");
  return record("index_select", out, {x},
                [d, index = save(index), in = x.sizes()](const Tensor& g) -> TensorList {
                  return {index_select_backward(g, d, index, in)};
                });
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  Tensor out = ops::gather(x, dim, index);  // validates
  const int64_t d = wrap_dim(dim, x.dim(), "gather");
  return record("gather", out, {x},
                [d, index = save(index), in = x.sizes()](const Tensor& g) -> TensorList {
                  return {scatter_add(zeros(in, TensorOptions(g.dtype()).device(g.device())), d, index, g)};
                });
}

Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  Tensor out = ops::scatter_add(x, dim, index, src);  // validates
  const int64_t d = wrap_dim(dim, x.dim(), "scatter_add");
  return record("scatter_add", out, {x, src},
                [d, index = save(index), src_sizes = src.sizes()](const Tensor& g) -> TensorList {
                  Tensor gsrc;
                  if (needs_input_grad(1)) gsrc = pad_to(gather(g, d, index), src_sizes);
                  return {g, gsrc};
                });
}

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  Tensor out = ops::embedding(weight, indices);  // validates
  Tensor result = record("embedding", out, {weight},
                         [indices = save(indices), num = weight.sizes()[0]](const Tensor& g) -> TensorList {
                           return {embedding_backward(g, indices, num)};
                         });
  EMBER_TRACE(result, "embedding", {weight, indices});
  return result;
}

Tensor tril(const Tensor& x, int64_t diagonal) {
  return record("tril", ops::tril(x, diagonal), {x},
                [diagonal](const Tensor& g) -> TensorList { return {tril(g, diagonal)}; });
}

Tensor triu(const Tensor& x, int64_t diagonal) {
  return record("triu", ops::triu(x, diagonal), {x},
                [diagonal](const Tensor& g) -> TensorList { return {triu(g, diagonal)}; });
}

// ---- dropout ----

Tensor dropout(const Tensor& x, double p, bool training) {
  ember::detail::check_defined("dropout", x);
  EMBER_CHECK(p >= 0 && p < 1, ValueError, "[dropout] p must be in [0, 1), got ", p);
  if (p == 0 || !training) return x;
  EMBER_CHECK(is_floating(x.dtype()), DTypeError, "[dropout] needs a floating tensor, got ", x.dtype());
  // Counters are reserved from the device's default generator, so the mask depends only on
  // (seed, offset): reruns from the same state (manual_seed, checkpoint) reproduce it.
  Generator::State s = default_generator(x.device()).reserve(ops::dropout_counters(x.numel()));
  Tensor mask = ops::dropout_mask(x.sizes(), x.device(), s, p);
  return masked_scale(x, mask, 1.0 / (1.0 - p));
}

}  // namespace ember
