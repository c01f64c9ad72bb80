// Differentiable indexing (x.index, index_put_), masks (nonzero, masked_select), einsum and the
// small tensor ops a PyTorch user reaches for (bmm, one_hot, repeat, tile, unbind, diag, outer,
// meshgrid), plus logic/bitwise ops. Most are composites of views, matmul and reductions and
// need no VJP of their own; the gather of advanced indexing (VJP: an accumulating put into
// zeros, whose own VJP is the gather again, so double backward works), the functional
// index_put and diag of a matrix (a strided view) declare theirs here.
//
// Note [indexing semantics]: x.index(list) applies the list left to right on x's dims:
// integers select (the dim goes), slices narrow, None unsqueezes, Ellipsis skips the dims the
// other entries leave, a bool unsqueezes and indexes the new dim with [0] (true) or [] (false);
// a 0-d integer tensor selects (reading its value: a host synchronization on CUDA, as in
// PyTorch); other tensors are advanced indices, gathered at the end by ops::index with
// PyTorch's placement (Note [advanced index placement], ember/ops/indexing.h). All but the
// advanced part are views.
#include <algorithm>
#include <map>

#include "ember/factory.h"
#include "ember/indexing.h"
#include "ember/ops/indexing.h"
#include "inplace.h"

namespace ember {

using autograd::needs_input_grad;
using autograd::record;
using autograd::save;
using indexing::TensorIndex;

namespace {

TensorOptions options_of(const Tensor& t, DType dtype) { return TensorOptions(dtype).device(t.device()); }

bool is_mask_dtype(DType t) { return t == DType::b8 || t == DType::u8; }

// What a list entry consumes of x's dims.
int64_t consumed_dims(const TensorIndex& i) {
  switch (i.kind()) {
    case TensorIndex::Kind::integer:
    case TensorIndex::Kind::slice: return 1;
    case TensorIndex::Kind::tensor: {
      const Tensor& t = i.tensor();
      ember::detail::check_defined("index", t, "index tensor");
      if (is_mask_dtype(t.dtype())) return t.dim();  // a 0-d mask acts as a bool: 0
      return 1;
    }
    default: return 0;
  }
}

struct Applied {
  Tensor view;     // x after the basic indices
  TensorList adv;  // entries for ops::expand_index_masks (undefined: a whole dim)
  bool any_adv = false;
};

Applied apply_basic(const char* op, const Tensor& x, const std::vector<TensorIndex>& indices) {
  ember::detail::check_defined(op, x);
  int64_t specified = 0, ellipses = 0;
  for (const TensorIndex& i : indices) {
    specified += consumed_dims(i);
    ellipses += i.is_ellipsis();
  }
  EMBER_CHECK(ellipses <= 1, IndexError, "[", op, "] an index can only have a single ellipsis");
  EMBER_CHECK(specified <= x.dim(), IndexError, "[", op, "] too many indices for a tensor of ", x.dim(),
              " dims: the index covers ", specified);
  Applied a;
  a.view = x;
  int64_t dim = 0, covered = 0;
  auto record_adv = [&](const Tensor& t, int64_t dims) {
    for (; covered < dim; ++covered) a.adv.push_back(Tensor());
    a.adv.push_back(t);
    covered += dims;
    dim += dims;
    a.any_adv = true;
  };
  auto bool_index = [&](bool b) {
    a.view = unsqueeze(a.view, dim);
    record_adv(b ? zeros({1}, options_of(x, DType::i64)) : empty({0}, options_of(x, DType::i64)), 1);
  };
  for (const TensorIndex& i : indices) {
    switch (i.kind()) {
      case TensorIndex::Kind::integer: a.view = select(a.view, dim, i.integer()); break;
      case TensorIndex::Kind::slice: {
        const indexing::Slice& s = i.slice();
        const int64_t step = s.step().value_or(1);
        EMBER_CHECK(step > 0, ValueError, "[", op, "] slice step must be positive, got ", step);
        const int64_t n = a.view.sizes()[size_t(dim)];
        a.view = slice(a.view, dim, s.start().value_or(0), s.stop().value_or(n), step);
        ++dim;
        break;
      }
      case TensorIndex::Kind::none: a.view = unsqueeze(a.view, dim++); break;
      case TensorIndex::Kind::ellipsis: dim += x.dim() - specified; break;
      case TensorIndex::Kind::boolean: bool_index(i.boolean()); break;
      case TensorIndex::Kind::tensor: {
        const Tensor& t = i.tensor();
        if (t.dim() == 0 && is_mask_dtype(t.dtype())) {
          bool_index(t.item<int64_t>() != 0);
        } else if (t.dim() == 0 && (t.dtype() == DType::i64 || t.dtype() == DType::i32)) {
          a.view = select(a.view, dim, t.item<int64_t>());
        } else {
          record_adv(t, is_mask_dtype(t.dtype()) ? t.dim() : 1);
        }
        break;
      }
    }
  }
  return a;
}

std::vector<autograd::Saved> save_all(const TensorList& ts) {
  std::vector<autograd::Saved> s;
  for (const Tensor& t : ts) s.push_back(t.defined() ? save(t) : autograd::Saved());
  return s;
}
TensorList restore(const std::vector<autograd::Saved>& s) {
  TensorList ts;
  for (const autograd::Saved& t : s) ts.push_back(t.defined() ? t.get() : Tensor());
  return ts;
}

Tensor advanced_index(const Tensor& x, const TensorList& list, bool unique);

// Zeros of `sizes` with g summed in at `list` (repeated indices accumulate). `unique`: the
// index tuples cannot repeat (one mask's nonzero columns), so a plain put is the same sum and
// skips the accumulating path's ordering work.
Tensor index_backward(const Tensor& g, const TensorList& list, const Shape& sizes, bool unique) {
  Tensor z = ember::detail::make_tensor(sizes, g.dtype(), g.device());
  ops::fill_(z, 0);
  ops::index_put_(z, list, g, !unique);
  return record("index_backward", z, {g}, [list = save_all(list), unique](const Tensor& gg) -> TensorList {
    return {advanced_index(gg, restore(list), unique)};
  });
}

Tensor advanced_index(const Tensor& x, const TensorList& list, bool unique) {
  return record("index", ops::index(x, list), {x},
                [list = save_all(list), in = x.sizes(), unique](const Tensor& g) -> TensorList {
                  return {index_backward(g, restore(list), in, unique)};
                });
}

// True when the advanced entries are exactly one bool mask (nothing broadcast against it).
bool single_mask(const TensorList& adv) {
  int masks = 0, others = 0;
  for (const Tensor& t : adv)
    if (t.defined()) (is_mask_dtype(t.dtype()) ? masks : others) += 1;
  return masks == 1 && others == 0;
}

// x with x[list] replaced by (or, accumulate, increased by) values: out of place.
Tensor index_put_functional(const Tensor& x, const TensorList& list, const Tensor& values, bool accumulate) {
  Tensor out = ember::detail::make_tensor(x.sizes(), x.dtype(), x.device());
  ops::copy_(out, x);
  ops::index_put_(out, list, values, accumulate);
  return record("index_put", out, {x, values},
                [list = save_all(list), accumulate, vs = values.sizes()](const Tensor& g) -> TensorList {
                  const TensorList l = restore(list);
                  Tensor gx, gv;
                  if (needs_input_grad(0))
                    gx = accumulate ? g
                                    : index_put_functional(g, l, zeros({}, options_of(g, g.dtype())), false);
                  if (needs_input_grad(1)) gv = sum_to(advanced_index(g, l, false), vs);
                  return {gx, gv};
                });
}

// Diagonal k of dims d1, d2 as a view (no autograd): those dims removed, the diagonal last.
Tensor diagonal_view(const Tensor& x, int64_t k, int64_t d1 = 0, int64_t d2 = 1) {
  const int64_t r = x.sizes()[size_t(d1)], c = x.sizes()[size_t(d2)];
  const int64_t s1 = x.strides()[size_t(d1)], s2 = x.strides()[size_t(d2)];
  // c - k and r + k cannot overflow (0 <= r, c); -k is taken only when the diagonal is non-empty.
  const int64_t len = std::max<int64_t>(0, k >= 0 ? std::min(r, c - k) : std::min(r + k, c));
  const int64_t off = len == 0 ? 0 : (k >= 0 ? k * s2 : -k * s1);
  Shape sizes = x.sizes(), strides = x.strides();
  for (int64_t d : {std::max(d1, d2), std::min(d1, d2)}) {
    sizes.erase(size_t(d));
    strides.erase(size_t(d));
  }
  sizes.push_back(len);
  strides.push_back(s1 + s2);
  return ember::detail::make_view(x, sizes, strides, x.storage_offset() + off);
}

// Zeros of `sizes` with g on diagonal k of dims d1, d2: the VJP of diagonal(), and diag() of a
// vector. Recorded: its own VJP is the diagonal of its gradient.
Tensor diagonal_scatter(const Tensor& g, int64_t k, int64_t d1, int64_t d2, const Shape& sizes) {
  Tensor z = ember::detail::make_tensor(sizes, g.dtype(), g.device());
  ops::fill_(z, 0);
  ops::copy_(diagonal_view(z, k, d1, d2), g);
  return record("diagonal_scatter", z, {g},
                [k, d1, d2](const Tensor& gg) -> TensorList { return {diagonal(gg, k, d1, d2)}; });
}

void check_bitwise(const char* op, const Tensor& a) {
  ember::detail::check_defined(op, a);
  EMBER_CHECK(!is_floating(a.dtype()), DTypeError, "[", op, "] is only defined for integer and bool tensors, got ",
              a.dtype());
}

}  // namespace

// ---- indexing ----

Tensor index(const Tensor& x, const std::vector<TensorIndex>& indices) {
  Applied a = apply_basic("index", x, indices);
  if (!a.any_adv) return a.view;
  return advanced_index(a.view, ops::expand_index_masks("index", a.view.sizes(), a.adv), single_mask(a.adv));
}

Tensor index_put(const Tensor& x, const std::vector<TensorIndex>& indices, const Tensor& values, bool accumulate) {
  ember::detail::check_defined("index_put", x);
  ember::detail::check_defined("index_put", values, "values");
  // The flat positions of the indexed elements, laid out as x.index(indices) is: one gather
  // index over x's elements serves every kind of index list.
  Tensor pos;
  {
    NoGradGuard no_grad;
    pos = index(arange(x.numel(), options_of(x, DType::i64)).view(x.sizes()), indices);
  }
  Tensor out = index_put_functional(reshape(x, {x.numel()}), {pos}, values, accumulate);
  return reshape(out, x.sizes());
}

Tensor& index_put_(Tensor& x, const std::vector<TensorIndex>& indices, const Tensor& values, bool accumulate) {
  ember::detail::check_defined("index_put_", x);
  ember::detail::check_defined("index_put_", values, "values");
  return autograd::apply_inplace(
      "index_put_", x, values.requires_grad(),
      [&](const Tensor& self) { return index_put(self, indices, values, accumulate); },
      [&] {
        NoGradGuard no_grad;
        Applied a = apply_basic("index_put_", x, indices);
        if (a.any_adv) {
          ops::index_put_(a.view, ops::expand_index_masks("index_put_", a.view.sizes(), a.adv), values, accumulate);
        } else if (accumulate) {
          ops::binary_out(ops::BinaryOp::add, a.view, values, a.view);
        } else {
          ops::copy_(a.view, values);
        }
      });
}

Tensor nonzero(const Tensor& x) { return ops::nonzero(x); }

Tensor masked_select(const Tensor& x, const Tensor& mask) {
  ember::detail::check_defined("masked_select", x);
  ember::detail::check_defined("masked_select", mask, "mask");
  EMBER_CHECK(mask.dtype() == DType::b8, DTypeError, "[masked_select] mask must be a bool tensor, got ",
              mask.dtype());
  Shape s = broadcast_shapes(x.sizes(), mask.sizes(), "masked_select");
  if (s.empty()) s = Shape{1};
  Tensor m = mask.dim() == 0 ? mask.reshape({1}) : mask;
  Tensor xx = x.dim() == 0 ? x.reshape({1}) : x;
  return index(expand(xx, s), {TensorIndex(expand(m, s))});
}

// ---- einsum ----

namespace {

struct Term {
  std::vector<int> labels;  // letters as 0..51, ellipsis dims as 52 + j
};

int letter_id(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return 26 + (c - 'a');
  return -1;
}
char letter_of(int id) { return id < 26 ? char('A' + id) : char('a' + id - 26); }
constexpr int kEllipsisBase = 52;

// Parses "ab...c" into letters with a marker (-1) where "..." stands.
std::vector<int> parse_term(const std::string& s, const std::string& eq) {
  std::vector<int> out;
  bool ellipsis = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == ' ') continue;
    if (c == '.') {
      EMBER_CHECK(s.compare(i, 3, "...") == 0 && !ellipsis, ValueError, "[einsum] invalid ellipsis in '", eq, "'");
      ellipsis = true;
      out.push_back(-1);
      i += 2;
      continue;
    }
    const int id = letter_id(c);
    EMBER_CHECK(id >= 0, ValueError, "[einsum] invalid subscript '", std::string(1, c), "' in '", eq,
                "': subscripts are letters a-z, A-Z");
    out.push_back(id);
  }
  return out;
}

struct Operand {
  Tensor t;
  std::vector<int> labels;
};

// Sums away the dims whose labels are not in `keep`.
void sum_unkept(Operand& o, const std::vector<bool>& keep) {
  Shape dims;
  std::vector<int> left;
  for (size_t d = 0; d < o.labels.size(); ++d) {
    if (keep[size_t(o.labels[d])]) left.push_back(o.labels[d]);
    else dims.push_back(int64_t(d));
  }
  if (dims.empty()) return;
  o.t = sum(o.t, dims);
  o.labels = left;
}

Operand contract(Operand a, Operand b, const std::vector<bool>& keep, const std::vector<int64_t>& size) {
  auto has = [](const Operand& o, int l) { return std::find(o.labels.begin(), o.labels.end(), l) != o.labels.end(); };
  std::vector<bool> keep_a = keep, keep_b = keep;
  for (int l : b.labels) keep_a[size_t(l)] = true;
  for (int l : a.labels) keep_b[size_t(l)] = true;
  sum_unkept(a, keep_a);
  sum_unkept(b, keep_b);
  std::vector<int> batch, aonly, bonly, con;
  for (int l : a.labels) (has(b, l) ? (keep[size_t(l)] ? batch : con) : aonly).push_back(l);
  for (int l : b.labels)
    if (!has(a, l)) bonly.push_back(l);
  // Permutes o to `order` and expands size-1 dims to the label's size, as one [P, Q, R] block.
  auto arrange = [&](const Operand& o, const std::vector<std::vector<int>>& groups) {
    Shape perm, shape, block;
    for (const auto& g : groups) {
      int64_t n = 1;
      for (int l : g) {
        perm.push_back(std::find(o.labels.begin(), o.labels.end(), l) - o.labels.begin());
        shape.push_back(size[size_t(l)]);
        n *= size[size_t(l)];
      }
      block.push_back(n);
    }
    return reshape(expand(permute(o.t, perm), shape), block);
  };
  Tensor ra = arrange(a, {batch, aonly, con}), rb = arrange(b, {batch, con, bonly});
  Operand r;
  r.t = matmul(ra, rb);
  Shape shape;
  for (const auto* g : {&batch, &aonly, &bonly})
    for (int l : *g) {
      shape.push_back(size[size_t(l)]);
      r.labels.push_back(l);
    }
  r.t = reshape(r.t, shape);
  return r;
}

}  // namespace

Tensor einsum(const std::string& equation, const TensorList& tensors) {
  EMBER_CHECK(!tensors.empty(), ValueError, "[einsum] needs at least one operand");
  const size_t arrow = equation.find("->");
  const std::string lhs = equation.substr(0, arrow);
  std::vector<std::vector<int>> terms;
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    terms.push_back(parse_term(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start), equation));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  EMBER_CHECK(terms.size() == tensors.size(), ValueError, "[einsum] '", equation, "' has ", int64_t(terms.size()),
              " operands but ", int64_t(tensors.size()), " tensors were given");
  // Ellipsis dims: right-aligned across operands, as broadcasting aligns them.
  int64_t ell = 0;
  std::vector<Operand> ops_;
  for (size_t k = 0; k < terms.size(); ++k) {
    ember::detail::check_defined("einsum", tensors[k]);
    const int64_t letters = int64_t(std::count_if(terms[k].begin(), terms[k].end(), [](int l) { return l >= 0; }));
    const bool has_ell = letters != int64_t(terms[k].size());
    const int64_t nd = tensors[k].dim();
    EMBER_CHECK(has_ell ? nd >= letters : nd == letters, ShapeError, "[einsum] operand ", int64_t(k), " has ", nd,
                " dims but subscripts '", lhs, "' give it ", letters, has_ell ? " or more" : "");
    if (has_ell) ell = std::max(ell, nd - letters);
  }
  std::vector<int64_t> size(size_t(kEllipsisBase + ell), -1);
  std::vector<int> count(size.size(), 0);
  for (size_t k = 0; k < terms.size(); ++k) {
    const Tensor& t = tensors[k];
    const int64_t e = t.dim() - int64_t(std::count_if(terms[k].begin(), terms[k].end(), [](int l) { return l >= 0; }));
    Operand o{t, {}};
    for (int l : terms[k]) {
      if (l >= 0) {
        o.labels.push_back(l);
        continue;
      }
      for (int64_t j = 0; j < e; ++j) o.labels.push_back(int(kEllipsisBase + ell - e + j));
    }
    // A subscript repeated within an operand ("ii->i", "ii->", "bii->bi") takes its diagonal,
    // which then stands for the subscript once (at the end of the operand's dims).
    for (size_t d1 = 0; d1 < o.labels.size(); ++d1) {
      for (size_t d2 = d1 + 1; d2 < o.labels.size();) {
        if (o.labels[d2] != o.labels[d1]) {
          ++d2;
          continue;
        }
        const int l = o.labels[d1];
        EMBER_CHECK(o.t.sizes()[d1] == o.t.sizes()[d2], ShapeError, "[einsum] subscript '", std::string(1, letter_of(l)),
                    "' repeats in operand ", int64_t(k), " of '", equation, "' over dims of sizes ", o.t.sizes()[d1],
                    " and ", o.t.sizes()[d2], ": a diagonal needs them equal");
        o.t = diagonal(o.t, 0, int64_t(d1), int64_t(d2));
        o.labels.erase(o.labels.begin() + std::ptrdiff_t(d2));
        o.labels.erase(o.labels.begin() + std::ptrdiff_t(d1));
        o.labels.push_back(l);
        d2 = d1 + 1;  // the labels moved: look again from here
      }
    }
    for (size_t d = 0; d < o.labels.size(); ++d) {
      const int l = o.labels[d];
      const int64_t n = o.t.sizes()[d];
      int64_t& s = size[size_t(l)];
      EMBER_CHECK(s == -1 || s == n || s == 1 || n == 1, ShapeError, "[einsum] subscript '",
                  std::string(1, l < kEllipsisBase ? letter_of(l) : '.'), "' has size ", n, " in operand ",
                  int64_t(k), " but ", s, " elsewhere in '", equation, "'");
      s = s == -1 || s == 1 ? n : s;
      ++count[size_t(l)];
    }
    ops_.push_back(std::move(o));
  }
  std::vector<int> out;
  if (arrow != std::string::npos) {
    for (int l : parse_term(equation.substr(arrow + 2), equation)) {
      if (l < 0) {
        for (int64_t j = 0; j < ell; ++j) out.push_back(int(kEllipsisBase + j));
        continue;
      }
      EMBER_CHECK(count[size_t(l)] > 0, ValueError, "[einsum] output subscript '", std::string(1, letter_of(l)),
                  "' of '", equation, "' appears in no operand");
      EMBER_CHECK(std::count(out.begin(), out.end(), l) == 0, ValueError, "[einsum] output subscript '",
                  std::string(1, letter_of(l)), "' repeats in '", equation, "'");
      out.push_back(l);
    }
  } else {  // implicit: the ellipsis dims, then the letters written once, in alphabetical order
    // ("ii" is a trace, as in NumPy and PyTorch: its letter is written twice).
    std::vector<int> written(size_t(kEllipsisBase), 0);
    for (const auto& term : terms)
      for (int l : term)
        if (l >= 0) ++written[size_t(l)];
    for (int64_t j = 0; j < ell; ++j) out.push_back(int(kEllipsisBase + j));
    for (int l = 0; l < kEllipsisBase; ++l)
      if (written[size_t(l)] == 1) out.push_back(l);
  }
  std::vector<bool> in_out(size.size(), false);
  for (int l : out) in_out[size_t(l)] = true;
  // Left to right: each contraction keeps what the output or a later operand needs.
  Operand acc = ops_[0];
  for (size_t k = 1; k < ops_.size(); ++k) {
    std::vector<bool> keep = in_out;
    for (size_t j = k + 1; j < ops_.size(); ++j)
      for (int l : ops_[j].labels) keep[size_t(l)] = true;
    acc = contract(acc, ops_[k], keep, size);
  }
  sum_unkept(acc, in_out);
  Shape perm, shape;
  for (int l : out) {
    perm.push_back(std::find(acc.labels.begin(), acc.labels.end(), l) - acc.labels.begin());
    shape.push_back(size[size_t(l)]);
  }
  return expand(permute(acc.t, perm), shape);
}

// ---- small tensor ops ----

Tensor bmm(const Tensor& a, const Tensor& b) {
  ember::detail::check_defined("bmm", a);
  ember::detail::check_defined("bmm", b, "second input");
  EMBER_CHECK(a.dim() == 3 && b.dim() == 3, ShapeError, "[bmm] expects 3-D tensors, got shapes ", a.sizes(),
              " and ", b.sizes());
  EMBER_CHECK(a.sizes()[0] == b.sizes()[0] && a.sizes()[2] == b.sizes()[1], ShapeError, "[bmm] shapes ",
              a.sizes(), " and ", b.sizes(), " do not match: need [B, n, m] and [B, m, p]");
  return matmul(a, b);
}

Tensor one_hot(const Tensor& indices, int64_t num_classes) {
  ember::detail::check_defined("one_hot", indices);
  EMBER_CHECK(indices.dtype() == DType::i64 || indices.dtype() == DType::i32, DTypeError,
              "[one_hot] indices must be an integer tensor (i64 or i32), got ", indices.dtype());
  EMBER_CHECK(num_classes >= -1, ValueError, "[one_hot] num_classes must be -1 or non-negative, got ", num_classes);
  if (indices.numel() == 0) {
    EMBER_CHECK(num_classes >= 0, ValueError, "[one_hot] cannot infer the number of classes from an empty tensor");
  } else if (num_classes == -1 || indices.is_cpu()) {
    // Reading the values synchronizes on CUDA, which PyTorch too only does when it must
    // infer num_classes; a CUDA one_hot with num_classes given is not checked (rows of a
    // value outside [0, num_classes) are all zero).
    NoGradGuard no_grad;
    const int64_t lo = amin(indices).item<int64_t>(), hi = amax(indices).item<int64_t>();
    EMBER_CHECK(lo >= 0, ValueError, "[one_hot] class values must be non-negative, got ", lo);
    if (num_classes == -1) num_classes = hi + 1;
    EMBER_CHECK(hi < num_classes, ValueError, "[one_hot] class value ", hi, " is not smaller than num_classes ",
                num_classes);
  }
  Tensor classes = arange(num_classes, options_of(indices, indices.dtype()));
  return ops::to(ops::binary(ops::BinaryOp::eq, unsqueeze(indices.detach(), -1), classes), indices.device(),
                 DType::i64);
}

Tensor repeat(const Tensor& x, const Shape& repeats) {
  ember::detail::check_defined("repeat", x);
  EMBER_CHECK(int64_t(repeats.size()) >= x.dim(), ShapeError, "[repeat] ", int64_t(repeats.size()),
              " repeat counts cannot be fewer than the tensor's ", x.dim(), " dims");
  const size_t n = repeats.size(), lead = n - size_t(x.dim());
  Shape padded, unsq, expanded, out;
  for (size_t d = 0; d < n; ++d) {
    EMBER_CHECK(repeats[d] >= 0, ValueError, "[repeat] repeat counts must be non-negative, got ", repeats);
    const int64_t s = d < lead ? 1 : x.sizes()[d - lead];
    padded.push_back(s);
    unsq.push_back(1);
    unsq.push_back(s);
    expanded.push_back(repeats[d]);
    expanded.push_back(s);
    out.push_back(repeats[d] * s);
  }
  return reshape(expand(reshape(x, unsq), expanded), out);
}

Tensor tile(const Tensor& x, const Shape& dims) {
  ember::detail::check_defined("tile", x);
  Shape r = dims;
  while (int64_t(r.size()) < x.dim()) r.insert(0, 1);
  return repeat(x, r);
}

TensorList unbind(const Tensor& x, int64_t dim) {
  ember::detail::check_defined("unbind", x);
  EMBER_CHECK(x.dim() > 0, ShapeError, "[unbind] cannot unbind a 0-d tensor");
  const int64_t d = wrap_dim(dim, x.dim(), "unbind");
  TensorList out;
  for (int64_t i = 0; i < x.sizes()[size_t(d)]; ++i) out.push_back(select(x, d, i));
  return out;
}

Tensor diag(const Tensor& x, int64_t diagonal) {
  ember::detail::check_defined("diag", x);
  EMBER_CHECK(x.dim() == 1 || x.dim() == 2, ShapeError, "[diag] expects a 1-D or 2-D tensor, got shape ", x.sizes());
  if (x.dim() == 2) return clone(ember::diagonal(x, diagonal));  // a copy, as torch.diag returns
  // A vector onto the diagonal of a square matrix: diag of that matrix is the vector again,
  // so this is the (recorded) transpose of the view.
  const int64_t n = x.sizes()[0] + (diagonal < 0 ? -diagonal : diagonal);
  return diagonal_scatter(x, diagonal, 0, 1, {n, n});
}

Tensor diagonal(const Tensor& x, int64_t offset, int64_t dim1, int64_t dim2) {
  ember::detail::check_defined("diagonal", x);
  EMBER_CHECK(x.dim() >= 2, ShapeError, "[diagonal] needs a tensor of at least 2 dims, got shape ", x.sizes());
  const int64_t d1 = wrap_dim(dim1, x.dim(), "diagonal"), d2 = wrap_dim(dim2, x.dim(), "diagonal");
  EMBER_CHECK(d1 != d2, ValueError, "[diagonal] dim1 and dim2 are both dim ", d1, ": they must differ");
  Tensor result = record("diagonal", diagonal_view(x, offset, d1, d2), {x},
                         [offset, d1, d2, in = x.sizes()](const Tensor& g) -> TensorList {
                           return {diagonal_scatter(g, offset, d1, d2, in)};
                         });
  EMBER_TRACE(result, "diagonal", {x}, {{"offset", offset}, {"dim1", d1}, {"dim2", d2}});
  return result;
}

Tensor outer(const Tensor& a, const Tensor& b) {
  ember::detail::check_defined("outer", a);
  ember::detail::check_defined("outer", b, "second input");
  EMBER_CHECK(a.dim() == 1 && b.dim() == 1, ShapeError, "[outer] expects 1-D tensors, got shapes ", a.sizes(),
              " and ", b.sizes());
  return mul(unsqueeze(a, 1), unsqueeze(b, 0));
}

TensorList meshgrid(const TensorList& tensors, const std::string& indexing) {
  EMBER_CHECK(indexing == "ij" || indexing == "xy", ValueError, "[meshgrid] indexing must be \"ij\" or \"xy\", got \"",
              indexing, "\"");
  const size_t k = tensors.size();
  Shape shape;
  for (size_t i = 0; i < k; ++i) {
    ember::detail::check_defined("meshgrid", tensors[i]);
    EMBER_CHECK(tensors[i].dim() <= 1, ShapeError, "[meshgrid] expects 0-D or 1-D tensors, got shape ",
                tensors[i].sizes(), " for input ", int64_t(i));
    shape.push_back(tensors[i].numel());
  }
  const bool xy = indexing == "xy" && k >= 2;
  if (xy) std::swap(shape[0], shape[1]);
  TensorList out;
  for (size_t i = 0; i < k; ++i) {
    Shape v(k, 1);
    const size_t at = xy && i < 2 ? 1 - i : i;
    v[at] = tensors[i].numel();
    out.push_back(expand(reshape(tensors[i], v), shape));
  }
  return out;
}

// ---- logic and bitwise (not differentiable; bool or integer results) ----

// Reported to a Tracer (Note [tracing]): masks built from the inputs export.
#define EMBER_LOGICAL(name)                                  \
  Tensor name(const Tensor& a, const Tensor& b) {            \
    Tensor y = ops::binary(ops::BinaryOp::name, a, b);       \
    EMBER_TRACE(y, #name, {a, b});                           \
    return y;                                                \
  }
EMBER_LOGICAL(logical_and)
EMBER_LOGICAL(logical_or)
EMBER_LOGICAL(logical_xor)
#undef EMBER_LOGICAL
Tensor logical_not(const Tensor& x) {
  ember::detail::check_defined("logical_not", x);
  Tensor y = ops::binary(ops::BinaryOp::eq, x, ops::scalar_tensor(0, x.dtype(), x.device()));
  EMBER_TRACE(y, "logical_not", {x});
  return y;
}
Tensor bitwise_and(const Tensor& a, const Tensor& b) {
  check_bitwise("bitwise_and", a);
  check_bitwise("bitwise_and", b);
  return ops::binary(ops::BinaryOp::bitwise_and, a, b);
}
Tensor bitwise_or(const Tensor& a, const Tensor& b) {
  check_bitwise("bitwise_or", a);
  check_bitwise("bitwise_or", b);
  return ops::binary(ops::BinaryOp::bitwise_or, a, b);
}
Tensor bitwise_xor(const Tensor& a, const Tensor& b) {
  check_bitwise("bitwise_xor", a);
  check_bitwise("bitwise_xor", b);
  return ops::binary(ops::BinaryOp::bitwise_xor, a, b);
}
Tensor bitwise_not(const Tensor& x) {
  check_bitwise("bitwise_not", x);
  if (x.dtype() == DType::b8) return logical_not(x);
  // ~v is v ^ all-ones in two's complement.
  return ops::binary(ops::BinaryOp::bitwise_xor, x,
                     ops::scalar_tensor(x.dtype() == DType::u8 ? Scalar(255) : Scalar(-1), x.dtype(), x.device()));
}

// ---- Tensor methods ----

Tensor Tensor::index(std::initializer_list<TensorIndex> indices) const {
  return ember::index(*this, std::vector<TensorIndex>(indices));
}
Tensor Tensor::index(const std::vector<TensorIndex>& indices) const { return ember::index(*this, indices); }
Tensor& Tensor::index_put_(std::initializer_list<TensorIndex> indices, const Tensor& values, bool accumulate) {
  return ember::index_put_(*this, std::vector<TensorIndex>(indices), values, accumulate);
}
Tensor& Tensor::index_put_(const std::vector<TensorIndex>& indices, const Tensor& values, bool accumulate) {
  return ember::index_put_(*this, indices, values, accumulate);
}
Tensor& Tensor::index_put_(std::initializer_list<TensorIndex> indices, Scalar value) {
  ember::detail::check_defined("index_put_", *this);
  return ember::index_put_(*this, std::vector<TensorIndex>(indices), ops::scalar_tensor(value, dtype(), device()));
}
Tensor& Tensor::index_put_(const std::vector<TensorIndex>& indices, Scalar value) {
  ember::detail::check_defined("index_put_", *this);
  return ember::index_put_(*this, indices, ops::scalar_tensor(value, dtype(), device()));
}
Tensor Tensor::operator[](const Tensor& index) const { return ember::index(*this, {TensorIndex(index)}); }
Tensor Tensor::nonzero() const { return ember::nonzero(*this); }
Tensor Tensor::masked_select(const Tensor& mask) const { return ember::masked_select(*this, mask); }
Tensor Tensor::bmm(const Tensor& o) const { return ember::bmm(*this, o); }
Tensor Tensor::outer(const Tensor& o) const { return ember::outer(*this, o); }
Tensor Tensor::repeat(const Shape& repeats) const { return ember::repeat(*this, repeats); }
Tensor Tensor::tile(const Shape& dims) const { return ember::tile(*this, dims); }
TensorList Tensor::unbind(int64_t dim) const { return ember::unbind(*this, dim); }
Tensor Tensor::diag(int64_t diagonal) const { return ember::diag(*this, diagonal); }
Tensor Tensor::diagonal(int64_t offset, int64_t dim1, int64_t dim2) const {
  return ember::diagonal(*this, offset, dim1, dim2);
}
Tensor Tensor::logical_not() const { return ember::logical_not(*this); }
Tensor Tensor::logical_and(const Tensor& o) const { return ember::logical_and(*this, o); }
Tensor Tensor::logical_or(const Tensor& o) const { return ember::logical_or(*this, o); }
Tensor Tensor::logical_xor(const Tensor& o) const { return ember::logical_xor(*this, o); }
Tensor Tensor::bitwise_not() const { return ember::bitwise_not(*this); }
Tensor Tensor::bitwise_and(const Tensor& o) const { return ember::bitwise_and(*this, o); }
Tensor Tensor::bitwise_or(const Tensor& o) const { return ember::bitwise_or(*this, o); }
Tensor Tensor::bitwise_xor(const Tensor& o) const { return ember::bitwise_xor(*this, o); }

}  // namespace ember
