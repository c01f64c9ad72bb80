// Note [onnx export]: io::export_onnx (ember/io/onnx.h) written with ONNX's own protobuf
// classes (libonnx-dev): nothing is hand-serialized.
//
// 1. Two traces (Note [tracing]). After one untraced call (what a module builds on first use
//    must not differ), the forward runs on the example, then on a second example of other
//    values whose dynamic axes are one longer, each under NoGradGuard with a Tracer. They must
//    agree op for op, attribute for attribute, except the attributes a symbolic reads from
//    both (a slice's bounds, a range's limit, a fill's shape): data-dependent control flow or a
//    size baked into an attribute is refused, naming the op.
// 2. Values. Every tensor an op reads is resolved, in the order the ops ran: a graph input, a
//    parameter or buffer (an initializer under its state_dict name), the output of an earlier
//    op, or else a constant, which must be bit for bit the same tensor in both traces: that is
//    what separates a true constant (a scalar operand, a table a module cached) from a tensor
//    computed from the inputs by an op the tracer does not see (argmax, sorting, indexing) or
//    sized by a dynamic axis. Storage versions must match what each op read.
// 3. Liveness. Only ops the outputs depend on are written: an op without an ONNX form fails
//    the export only when the graph needs it.
// 4. Nodes. Each op's symbolic writes standard opset-17 nodes. Sizes that differ between the
//    traces follow the dynamic axes: a Reshape target takes them from its input's shape at run
//    time, an Expand keeps them by broadcasting, a Slice to the end of a dim runs to INT64_MAX,
//    and a size that is a graph input's dynamic size (a range 0 .. T, x[:T] of a table, a fill
//    of the batch's size) is read off that input with Shape.
// 5. ONNX's checker and its strict shape inference (type checks on) run before the file is
//    written atomically; a failure there is an exporter bug and says so.
#include <onnx/checker.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numbers>
#include <unordered_map>

#include "../src/file_util.h"
#include "ember/factory.h"
#include "ember/functions.h"
#include "ember/grad_mode.h"
#include "ember/io/onnx.h"
#include "ember/nn/module.h"
#include "ember/random.h"
#include "ember/trace.h"

namespace ember::io {

namespace {

constexpr const char* kOp = "export_onnx";
constexpr int64_t kIrVersion = 8;  // ONNX 1.12's, what opset 17 came with

using trace::Event;

int32_t onnx_type(DType t) {
  switch (t) {
    case DType::f32: return onnx::TensorProto::FLOAT;
    case DType::f64: return onnx::TensorProto::DOUBLE;
    case DType::f16: return onnx::TensorProto::FLOAT16;
    case DType::bf16: return onnx::TensorProto::BFLOAT16;
    case DType::i64: return onnx::TensorProto::INT64;
    case DType::i32: return onnx::TensorProto::INT32;
    case DType::u8: return onnx::TensorProto::UINT8;
    case DType::b8: return onnx::TensorProto::BOOL;
  }
  return onnx::TensorProto::UNDEFINED;
}

Tensor host_contiguous(const Tensor& t) {
  NoGradGuard no_grad;
  return contiguous(to(t.detach(), Device::cpu(), t.dtype()));
}

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.sizes() != b.sizes()) return false;
  Tensor ha = host_contiguous(a), hb = host_contiguous(b);
  return std::memcmp(ha.data_ptr(), hb.data_ptr(), size_t(ha.numel()) * ha.element_size()) == 0;
}

std::string describe(const Event& e, size_t index) { return str("'", e.op, "' (op ", uint64_t(index), " of the forward)"); }

// ---- the graph under construction ----

class Graph {
 public:
  explicit Graph(onnx::GraphProto* g) : g_(g) {}

  std::string fresh(std::string_view hint) { return str(hint, "_", counter_++); }

  onnx::NodeProto* node(const std::string& op_type, const std::vector<std::string>& inputs,
                        const std::vector<std::string>& outputs) {
    onnx::NodeProto* n = g_->add_node();
    n->set_op_type(op_type);
    n->set_name(str(op_type, "_", uint64_t(g_->node_size())));
    for (const std::string& s : inputs) n->add_input(s);
    for (const std::string& s : outputs) n->add_output(s);
    return n;
  }
  // A node with one fresh output, returned.
  std::string op(const std::string& op_type, const std::vector<std::string>& inputs) {
    std::string out = fresh(op_type);
    node(op_type, inputs, {out});
    return out;
  }

  void initializer(const std::string& name, const Tensor& t) {
    Tensor h = host_contiguous(t);
    onnx::TensorProto* p = g_->add_initializer();
    p->set_name(name);
    p->set_data_type(onnx_type(h.dtype()));
    for (int64_t s : h.sizes()) p->add_dims(s);
    p->set_raw_data(std::string(static_cast<const char*>(h.data_ptr()), size_t(h.numel()) * h.element_size()));
    bytes_ += uint64_t(h.numel()) * h.element_size();
  }
  // A constant, shared by every use of the same dtype, shape and bits.
  std::string constant(const Tensor& t, std::string_view hint = "const") {
    Tensor h = host_contiguous(t);
    std::string key = str(dtype_name(h.dtype()), h.sizes(), ":");
    key.append(static_cast<const char*>(h.data_ptr()), size_t(h.numel()) * h.element_size());
    auto it = constants_.find(key);
    if (it != constants_.end()) return it->second;
    std::string name = fresh(hint);
    initializer(name, h);
    constants_.emplace(std::move(key), name);
    return name;
  }
  std::string ints(const std::vector<int64_t>& v) {
    return constant(tensor<int64_t>(v), "shape");
  }
  std::string scalar(double v, DType dt) { return constant(full({}, v, dt), "scalar"); }
  std::string ints_scalar(int64_t v) { return constant(full({}, v, DType::i64), "scalar"); }

  uint64_t bytes() const { return bytes_; }

 private:
  onnx::GraphProto* g_;
  int64_t counter_ = 0;
  uint64_t bytes_ = 0;
  std::unordered_map<std::string, std::string> constants_;
};

void set_int(onnx::NodeProto* n, const char* name, int64_t v) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}
void set_float(onnx::NodeProto* n, const char* name, double v) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(float(v));
}
void set_ints(onnx::NodeProto* n, const char* name, const std::vector<int64_t>& v) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}

// ---- one op's symbolic: what it sees ----

struct OpCtx {
  Graph& g;
  const Event& e;   // the first trace's op
  const Event& e2;  // the same op in the second trace
  size_t index;     // its position in the forward
  std::vector<std::string> in;  // value names of e.inputs ("" where absent)
  std::string out;              // the name its output must be written to
  const TensorList& graph_inputs;   // the first trace's, and the second's
  const TensorList& graph_inputs2;
  const std::vector<std::string>& graph_input_names;
  const OnnxExportOptions& options;

  // The name of dynamic axis d of graph input i.
  std::string axis_name(size_t i, int64_t d) const {
    auto axes = options.dynamic_axes.find(graph_input_names[i]);
    if (axes != options.dynamic_axes.end())
      if (auto it = axes->second.find(d); it != axes->second.end()) return it->second;
    return str(graph_input_names[i], "_dim", d);
  }

  bool has(size_t i) const { return i < in.size() && !in[i].empty(); }
  const Shape& shape(size_t i) const { return e.inputs[i].sizes(); }
  const Shape& shape2(size_t i) const { return e2.inputs[i].sizes(); }
  DType dtype(size_t i) const { return e.inputs[i].dtype(); }
  const Shape& out_shape() const { return e.output.sizes(); }
  const Shape& out_shape2() const { return e2.output.sizes(); }
  DType out_dtype() const { return e.output.dtype(); }

  [[noreturn]] void fail(const std::string& why) const {
    throw ValueError(str("[", kOp, "] ", describe(e, index), " ", why));
  }
  // Input i as dtype `to` (a Cast where it differs).
  std::string as(size_t i, DType to) {
    if (dtype(i) == to) return in[i];
    onnx::NodeProto* n = g.node("Cast", {in[i]}, {g.fresh("cast")});
    set_int(n, "to", onnx_type(to));
    return n->output(0);
  }
  // A size that is v1 in the first trace and v2 in the second, as a 1-D int64 tensor [size] read
  // off the graph input whose dynamic axis has those sizes (Shape with start/end, opset 15).
  std::string dynamic_size(int64_t v1, int64_t v2, const char* what) {
    std::string found, found_axis;
    for (size_t i = 0; i < graph_inputs.size(); ++i)
      for (int64_t d = 0; d < graph_inputs[i].dim(); ++d) {
        const int64_t s1 = graph_inputs[i].sizes()[size_t(d)], s2 = graph_inputs2[i].sizes()[size_t(d)];
        if (s1 == s2 || s1 != v1 || s2 != v2) continue;
        // Two inputs' axes of one name (both "batch") are one size; two names are ambiguous.
        const std::string axis = axis_name(i, d);
        if (!found.empty() && axis == found_axis) continue;
        if (!found.empty())
          fail(str("takes a ", what, " that equals two dynamic axes of the inputs ('", found_axis, "' and '", axis,
                   "') in both traces; give the example different sizes along them"));
        found_axis = axis;
        onnx::NodeProto* n = g.node("Shape", {graph_input_names[i]}, {g.fresh("size")});
        set_int(n, "start", d);
        set_int(n, "end", d + 1);
        found = n->output(0);
      }
    if (found.empty())
      fail(str("takes a ", what, " (", v1, ", then ", v2, " with the dynamic axes one longer) that is no "
               "input's dynamic size: it cannot be exported with those axes dynamic"));
    return found;
  }
  // A static size: fails when the dim follows a dynamic axis.
  int64_t static_dim(size_t input, int64_t d, const char* what) const {
    if (shape(input)[size_t(d)] != shape2(input)[size_t(d)])
      fail(str("needs a fixed ", what, ", but dim ", d, " of its input follows a dynamic axis"));
    return shape(input)[size_t(d)];
  }
};

using Symbolic = void (*)(OpCtx&);

// The target shape of a Reshape of input 0 to the op's output, as a 1-D int64 tensor that is
// right at any size along the dynamic axes. The dims are matched in groups of equal products
// (in both traces), as a view's strides are: a group of one input dim is copied from the input
// at run time (0 where it keeps its position), a group of several is their product at run time
// (Shape -> ReduceProd): nothing is baked from the input, so a dim that merely looked fixed in
// the traces (a strided length rounded the same way twice) stays right. A dim split into
// several is baked where it is fixed, inferred (-1) for one that is not, and read off a
// graph input's dynamic size for any further one.
std::string reshape_target(OpCtx& c) {
  const Shape &i1 = c.shape(0), &i2 = c.shape2(0), &o1 = c.out_shape(), &o2 = c.out_shape2();
  for (size_t j = 0; j < o1.size(); ++j)
    if (o1[j] == 0 || o2[j] == 0) c.fail("reshapes to an empty dim, which an ONNX Reshape reads as \"copy\"");
  std::vector<std::string> pieces;
  std::vector<int64_t> pending;  // constants waiting to be joined into one piece
  auto flush = [&] {
    if (!pending.empty()) pieces.push_back(c.g.ints(pending));
    pending.clear();
  };
  auto input_dims = [&](size_t a, size_t b) {  // Shape(x)[a:b] at run time
    onnx::NodeProto* n = c.g.node("Shape", {c.in[0]}, {c.g.fresh("dims")});
    set_int(n, "start", int64_t(a));
    set_int(n, "end", int64_t(b));
    return n->output(0);
  };
  bool inferred = false;
  size_t i = 0, j = 0;
  while (j < o1.size()) {
    if (o1[j] == 1 && o2[j] == 1) {  // a new (or kept) unit dim
      pending.push_back(1);
      ++j;
      while (i < i1.size() && i1[i] == 1 && i2[i] == 1 && (j >= o1.size() || o1[j] != 1)) ++i;
      continue;
    }
    while (i < i1.size() && i1[i] == 1 && i2[i] == 1) ++i;  // dropped unit dims
    const size_t gi = i, gj = j;
    int64_t p1 = 1, p2 = 1, q1 = 1, q2 = 1;
    do {
      if (i < i1.size() && (i == gi || p1 < q1 || (p1 == q1 && p2 < q2))) p1 *= i1[i], p2 *= i2[i], ++i;
      else if (j < o1.size()) q1 *= o1[j], q2 *= o2[j], ++j;
      else break;
    } while (p1 != q1 || p2 != q2 || j == gj);
    if (p1 != q1 || p2 != q2) c.fail(str("reshapes ", i1, " to ", o1, ": the sizes do not group (internal error)"));
    const size_t n_in = i - gi, n_out = j - gj;
    if (n_out == 1) {
      if (n_in == 1 && gi == gj) {
        pending.push_back(0);  // Reshape's "copy this dim"
      } else {
        flush();
        std::string dims = input_dims(gi, i);
        if (n_in > 1) {
          onnx::NodeProto* prod = c.g.node("ReduceProd", {dims}, {c.g.fresh("merged")});
          set_int(prod, "keepdims", 1);
          dims = prod->output(0);
        }
        pieces.push_back(dims);
      }
      continue;
    }
    for (size_t k = gj; k < j; ++k) {  // a split: fixed sizes, one inferred, the rest read off the inputs
      if (o1[k] == o2[k]) {
        pending.push_back(o1[k]);
      } else if (!inferred) {
        pending.push_back(-1);
        inferred = true;
      } else {
        flush();
        pieces.push_back(c.dynamic_size(o1[k], o2[k], "size"));
      }
    }
  }
  flush();
  if (pieces.empty()) return c.g.ints({});
  if (pieces.size() == 1) return pieces[0];
  onnx::NodeProto* cat = c.g.node("Concat", pieces, {c.g.fresh("target")});
  set_int(cat, "axis", 0);
  return cat->output(0);
}

void elementwise(OpCtx& c, const char* op_type) {
  std::vector<std::string> ins;
  for (size_t i = 0; i < c.in.size(); ++i) ins.push_back(c.as(i, c.out_dtype()));
  c.g.node(op_type, ins, {c.out});
}

void compare(OpCtx& c, const char* op_type, bool negate = false) {
  const DType t = promote_types(c.dtype(0), c.dtype(1));
  if (!negate) {
    c.g.node(op_type, {c.as(0, t), c.as(1, t)}, {c.out});
    return;
  }
  c.g.node("Not", {c.g.op(op_type, {c.as(0, t), c.as(1, t)})}, {c.out});
}
void logical(OpCtx& c, const char* op_type) { c.g.node(op_type, {c.as(0, DType::b8), c.as(1, DType::b8)}, {c.out}); }

void unary(OpCtx& c, const char* op_type) { c.g.node(op_type, {c.in[0]}, {c.out}); }

std::vector<int64_t> pads4(const std::vector<int64_t>& p) { return {p[0], p[1], p[0], p[1]}; }

// Conv or ConvTranspose of inputs x, weight [., ., kH, kW] and bias (if any), with conv2d's
// attributes (stride, padding, dilation, groups); returns the node for any further attribute.
onnx::NodeProto* conv(OpCtx& c, const char* op_type) {
  std::vector<std::string> ins = {c.in[0], c.in[1]};
  if (c.has(2)) ins.push_back(c.in[2]);
  onnx::NodeProto* n = c.g.node(op_type, ins, {c.out});
  set_ints(n, "kernel_shape", {c.shape(1)[2], c.shape(1)[3]});
  set_ints(n, "strides", c.e.attr_ints("stride"));
  set_ints(n, "pads", pads4(c.e.attr_ints("padding")));
  set_ints(n, "dilations", c.e.attr_ints("dilation"));
  set_int(n, "group", c.e.attr_int("groups"));
  return n;
}

// y = x * w (broadcast over the channel dim 1 of a rank-r x): w reshaped to [C, 1, ..., 1].
std::string channel_affine(OpCtx& c, const std::string& y, size_t param, const char* op_type) {
  const int64_t rank = int64_t(c.shape(0).size());
  std::vector<int64_t> axes;
  for (int64_t d = 1; d < rank - 1; ++d) axes.push_back(d);
  std::string p = c.in[param];
  if (!axes.empty()) p = c.g.op("Unsqueeze", {p, c.g.ints(axes)});
  return c.g.op(op_type, {y, p});
}


// x @ w^T (+ b) of a Linear: Gemm for a 2-D x, MatMul with the transposed weight otherwise.
std::string linear(OpCtx& c, const std::string& x, int64_t x_rank, const std::string& w, const std::string& b,
                   const std::string& out = {}) {
  const std::string y = out.empty() ? c.g.fresh("linear") : out;
  if (x_rank == 2) {
    std::vector<std::string> ins = {x, w};
    if (!b.empty()) ins.push_back(b);
    set_int(c.g.node("Gemm", ins, {y}), "transB", 1);
    return y;
  }
  onnx::NodeProto* t = c.g.node("Transpose", {w}, {c.g.fresh("weight_t")});
  set_ints(t, "perm", {1, 0});
  if (b.empty()) c.g.node("MatMul", {x, t->output(0)}, {y});
  else c.g.node("Add", {c.g.op("MatMul", {x, t->output(0)}), b}, {y});
  return y;
}

// GELU from opset-17 ops: x/2 (1 + erf(x / sqrt 2)), or with tanh(sqrt(2/pi) (x + 0.044715 x^3)).
std::string gelu(OpCtx& c, const std::string& x, bool tanh_form, DType dt, const std::string& out = {}) {
  std::string inner;
  if (tanh_form) {
    std::string x3 = c.g.op("Mul", {x, c.g.op("Mul", {x, x})});
    std::string s = c.g.op("Add", {x, c.g.op("Mul", {x3, c.g.scalar(0.044715, dt)})});
    inner = c.g.op("Tanh", {c.g.op("Mul", {s, c.g.scalar(std::sqrt(2.0 / std::numbers::pi), dt)})});
  } else {
    inner = c.g.op("Erf", {c.g.op("Div", {x, c.g.scalar(std::numbers::sqrt2, dt)})});
  }
  const std::string y = out.empty() ? c.g.fresh("gelu") : out;
  c.g.node("Mul", {c.g.op("Mul", {x, c.g.scalar(0.5, dt)}), c.g.op("Add", {inner, c.g.scalar(1.0, dt)})}, {y});
  return y;
}

void layer_norm(OpCtx& c) {  // inputs x, weight, bias
  const std::vector<int64_t>& ns = c.e.attr_ints("normalized_shape");
  std::string w = c.has(1) ? c.in[1] : c.g.constant(ones(Shape(ns), c.dtype(0)), "ones");
  std::vector<std::string> ins = {c.in[0], w};
  if (c.has(2)) ins.push_back(c.in[2]);
  onnx::NodeProto* n = c.g.node("LayerNormalization", ins, {c.out});
  set_int(n, "axis", -int64_t(ns.size()));
  set_float(n, "epsilon", c.e.attr_double("eps"));
}

// A 0-d int64 scalar from a 1-D [1] size.
std::string scalar_of(OpCtx& c, const std::string& size) { return c.g.op("Squeeze", {size, c.g.ints({0})}); }

// softmax(q k^T * scale + mask) v for q [.., T, D], k and v [.., S, D] (PyTorch's
// scaled_dot_product_attention): causal keeps key j <= query i (top-left aligned); a bool mask
// keeps where true, a float one is added.
std::string attention(OpCtx& c, const std::string& q, const std::string& k, const std::string& v, int64_t head_dim,
                      const std::string& mask, DType mask_dtype, bool causal, double scale, DType dt,
                      const std::string& out) {
  onnx::NodeProto* kt = c.g.node("Transpose", {k}, {c.g.fresh("k_t")});
  set_ints(kt, "perm", {0, 1, 3, 2});
  const double s = scale > 0 ? scale : 1.0 / std::sqrt(double(head_dim));
  std::string scores = c.g.op("Mul", {c.g.op("MatMul", {q, kt->output(0)}), c.g.scalar(s, dt)});
  const std::string neg_inf = c.g.scalar(-std::numeric_limits<double>::infinity(), dt);
  if (causal) {  // [T, S]: row i keeps columns j <= i
    auto positions = [&](const std::string& t, int64_t axis) {
      onnx::NodeProto* n = c.g.node("Shape", {t}, {c.g.fresh("length")});
      set_int(n, "start", axis);
      set_int(n, "end", axis + 1);
      return c.g.op("Range", {c.g.ints_scalar(0), scalar_of(c, n->output(0)), c.g.ints_scalar(1)});
    };
    std::string rows = c.g.op("Unsqueeze", {positions(q, 2), c.g.ints({1})});
    std::string keep = c.g.op("GreaterOrEqual", {rows, positions(k, 2)});
    scores = c.g.op("Where", {keep, scores, neg_inf});
  }
  if (!mask.empty()) {
    if (mask_dtype == DType::b8) scores = c.g.op("Where", {mask, scores, neg_inf});
    else scores = c.g.op("Add", {scores, mask});
  }
  onnx::NodeProto* sm = c.g.node("Softmax", {scores}, {c.g.fresh("attention")});
  set_int(sm, "axis", -1);
  c.g.node("MatMul", {sm->output(0), v}, {out});
  return out;
}

// Rows of a stacked-gate weight [G*H, k] (or bias [G*H]) in another gate order: blocks[i] is the
// PyTorch gate that goes to ONNX's place i.
std::string reorder_gates(OpCtx& c, const std::string& w, int64_t hidden, const std::vector<int64_t>& blocks) {
  std::vector<int64_t> rows;
  for (int64_t b : blocks)
    for (int64_t i = 0; i < hidden; ++i) rows.push_back(b * hidden + i);
  onnx::NodeProto* n = c.g.node("Gather", {w, c.g.ints(rows)}, {c.g.fresh("gates")});
  set_int(n, "axis", 0);
  return n->output(0);
}

// One direction of an LSTM or GRU layer (ember's lstm_layer / gru_layer: x [T, N, I], the
// PyTorch weights, h0 / c0 [N, H] or absent) as ONNX's LSTM / GRU, and ember's packed result
// hc [P, T+1, N, H] (Note [rnn layout]) assembled from its outputs: the hidden rows are the
// initial state and Y. ONNX returns only the last cell state, so the LSTM's cell rows between
// c0 and c_n are NaN: no public result reads them (LSTM returns output, h_n and c_n).
void rnn_layer(OpCtx& c, bool lstm) {
  const int64_t gates = lstm ? 4 : 3, hidden = c.shape(1)[0] / gates;
  const DType dt = c.out_dtype();
  // PyTorch's gate order: LSTM i f g o, GRU r z n; ONNX's: LSTM i o f c, GRU z r h.
  const std::vector<int64_t> order = lstm ? std::vector<int64_t>{0, 3, 1, 2} : std::vector<int64_t>{1, 0, 2};
  auto batch1 = [&](const std::string& t) { return c.g.op("Unsqueeze", {t, c.g.ints({0})}); };
  std::vector<std::string> ins = {c.in[0], batch1(reorder_gates(c, c.in[1], hidden, order)),
                                  batch1(reorder_gates(c, c.in[2], hidden, order)), "", "", "", ""};
  if (c.has(3) || c.has(4)) {
    auto part = [&](size_t i) {
      return c.has(i) ? reorder_gates(c, c.in[i], hidden, order) : c.g.constant(zeros({gates * hidden}, dt), "zeros");
    };
    onnx::NodeProto* cat = c.g.node("Concat", {part(3), part(4)}, {c.g.fresh("bias")});
    set_int(cat, "axis", 0);
    ins[3] = batch1(cat->output(0));
  }
  if (c.has(5)) ins[5] = batch1(c.in[5]);
  if (lstm && c.has(6)) ins[6] = batch1(c.in[6]);
  if (!lstm) ins.resize(6);
  while (!ins.empty() && ins.back().empty()) ins.pop_back();
  const std::string y = c.g.fresh("rnn_y"), y_h = c.g.fresh("rnn_h"), y_c = c.g.fresh("rnn_c");
  std::vector<std::string> outs = {y, y_h};
  if (lstm) outs.push_back(y_c);
  onnx::NodeProto* n = c.g.node(lstm ? "LSTM" : "GRU", ins, outs);
  set_int(n, "hidden_size", hidden);
  const bool reverse = c.e.attr_int("reverse");
  onnx::AttributeProto* dir = n->add_attribute();
  dir->set_name("direction");
  dir->set_type(onnx::AttributeProto::STRING);
  dir->set_s(reverse ? "reverse" : "forward");
  if (!lstm) set_int(n, "linear_before_reset", 1);  // PyTorch's GRU: r * (W_hn h + b_hn)
  // The states as [1, N, H] rows, zeros where no initial one was given.
  auto initial = [&](size_t i) {
    if (c.has(i)) return batch1(c.in[i]);
    return c.g.op("Expand", {c.g.scalar(0.0, dt), c.g.op("Shape", {y_h})});
  };
  auto concat0 = [&](std::vector<std::string> parts) {
    onnx::NodeProto* cat = c.g.node("Concat", parts, {c.g.fresh("rows")});
    set_int(cat, "axis", 0);
    return cat->output(0);
  };
  const std::string steps = c.g.op("Squeeze", {y, c.g.ints({1})});  // [T, N, H]
  std::vector<std::string> hidden_rows = {initial(5), steps};
  if (reverse) std::swap(hidden_rows[0], hidden_rows[1]);
  std::vector<std::string> packed = {batch1(concat0(hidden_rows))};
  if (lstm) {
    // Steps 1 .. T-1 of `steps` have the right shape for the unknown middle rows.
    std::string middle = c.g.op("Mul", {c.g.op("Slice", {steps, c.g.ints({1}), c.g.ints({INT64_MAX}), c.g.ints({0})}),
                                        c.g.scalar(std::numeric_limits<double>::quiet_NaN(), dt)});
    std::vector<std::string> cell_rows = {initial(6), middle, y_c};
    if (reverse) std::swap(cell_rows[0], cell_rows[2]);
    packed.push_back(batch1(concat0(cell_rows)));
  }
  if (packed.size() == 1) c.g.node("Identity", {packed[0]}, {c.out});
  else set_int(c.g.node("Concat", packed, {c.out}), "axis", 0);
}

const std::unordered_map<std::string, Symbolic>& symbolics() {
  static const std::unordered_map<std::string, Symbolic> table = {
      // ---- elementwise ----
      {"add", [](OpCtx& c) { elementwise(c, "Add"); }},
      {"sub", [](OpCtx& c) { elementwise(c, "Sub"); }},
      {"mul", [](OpCtx& c) { elementwise(c, "Mul"); }},
      {"div", [](OpCtx& c) { elementwise(c, "Div"); }},
      {"pow",
       [](OpCtx& c) {
         if (c.in.size() == 2) return elementwise(c, "Pow");
         c.g.node("Pow", {c.as(0, c.out_dtype()), c.g.scalar(c.e.attr_double("exponent"), c.out_dtype())}, {c.out});
       }},
      {"maximum", [](OpCtx& c) { elementwise(c, "Max"); }},
      {"minimum", [](OpCtx& c) { elementwise(c, "Min"); }},
      {"where",
       [](OpCtx& c) {
         c.g.node("Where", {c.as(0, DType::b8), c.as(1, c.out_dtype()), c.as(2, c.out_dtype())}, {c.out});
       }},
      // ---- comparisons and logic (bool results; operands promoted as ember promotes them) ----
      {"eq", [](OpCtx& c) { compare(c, "Equal"); }},
      {"ne", [](OpCtx& c) { compare(c, "Equal", true); }},
      {"lt", [](OpCtx& c) { compare(c, "Less"); }},
      {"le", [](OpCtx& c) { compare(c, "LessOrEqual"); }},
      {"gt", [](OpCtx& c) { compare(c, "Greater"); }},
      {"ge", [](OpCtx& c) { compare(c, "GreaterOrEqual"); }},
      {"logical_and", [](OpCtx& c) { logical(c, "And"); }},
      {"logical_or", [](OpCtx& c) { logical(c, "Or"); }},
      {"logical_xor", [](OpCtx& c) { logical(c, "Xor"); }},
      {"logical_not", [](OpCtx& c) { c.g.node("Not", {c.as(0, DType::b8)}, {c.out}); }},
      {"relu", [](OpCtx& c) { unary(c, "Relu"); }},
      {"tanh", [](OpCtx& c) { unary(c, "Tanh"); }},
      {"sigmoid", [](OpCtx& c) { unary(c, "Sigmoid"); }},
      {"exp", [](OpCtx& c) { unary(c, "Exp"); }},
      {"log", [](OpCtx& c) { unary(c, "Log"); }},
      {"neg", [](OpCtx& c) { unary(c, "Neg"); }},
      {"sqrt", [](OpCtx& c) { unary(c, "Sqrt"); }},
      {"reciprocal", [](OpCtx& c) { unary(c, "Reciprocal"); }},
      {"abs", [](OpCtx& c) { unary(c, "Abs"); }},
      {"sign", [](OpCtx& c) { unary(c, "Sign"); }},
      {"sin", [](OpCtx& c) { unary(c, "Sin"); }},
      {"cos", [](OpCtx& c) { unary(c, "Cos"); }},
      {"floor", [](OpCtx& c) { unary(c, "Floor"); }},
      {"ceil", [](OpCtx& c) { unary(c, "Ceil"); }},
      {"hardswish", [](OpCtx& c) { unary(c, "HardSwish"); }},
      {"rsqrt", [](OpCtx& c) { c.g.node("Reciprocal", {c.g.op("Sqrt", {c.in[0]})}, {c.out}); }},
      {"square", [](OpCtx& c) { c.g.node("Mul", {c.in[0], c.in[0]}, {c.out}); }},
      {"silu", [](OpCtx& c) { c.g.node("Mul", {c.in[0], c.g.op("Sigmoid", {c.in[0]})}, {c.out}); }},
      {"mish", [](OpCtx& c) { c.g.node("Mul", {c.in[0], c.g.op("Tanh", {c.g.op("Softplus", {c.in[0]})})}, {c.out}); }},
      {"hardsigmoid",
       [](OpCtx& c) {
         onnx::NodeProto* n = c.g.node("HardSigmoid", {c.in[0]}, {c.out});
         set_float(n, "alpha", 1.0 / 6.0);
         set_float(n, "beta", 0.5);
       }},
      {"leaky_relu", [](OpCtx& c) { set_float(c.g.node("LeakyRelu", {c.in[0]}, {c.out}), "alpha", c.e.attr_double("a")); }},
      {"elu", [](OpCtx& c) { set_float(c.g.node("Elu", {c.in[0]}, {c.out}), "alpha", c.e.attr_double("a")); }},
      {"softplus",
       [](OpCtx& c) {  // x * beta > threshold ? x : log(1 + exp(beta x)) / beta, as PyTorch
         const double beta = c.e.attr_double("a"), threshold = c.e.attr_double("b");
         const DType dt = c.out_dtype();
         std::string bx = c.g.op("Mul", {c.in[0], c.g.scalar(beta, dt)});
         std::string soft = c.g.op("Div", {c.g.op("Softplus", {bx}), c.g.scalar(beta, dt)});
         std::string over = c.g.op("Greater", {bx, c.g.scalar(threshold, dt)});
         c.g.node("Where", {over, c.in[0], soft}, {c.out});
       }},
      {"gelu", [](OpCtx& c) { gelu(c, c.in[0], c.e.attr_int("tanh_approximation"), c.out_dtype(), c.out); }},
      {"clamp",
       [](OpCtx& c) {  // Clip with the bounds given (in x's dtype; an absent one is an absent input)
         std::vector<std::string> ins = {c.in[0], "", ""};
         if (c.e.attr_int("has_min")) ins[1] = c.g.scalar(c.e.attr_double("min"), c.out_dtype());
         if (c.e.attr_int("has_max")) ins[2] = c.g.scalar(c.e.attr_double("max"), c.out_dtype());
         while (ins.back().empty()) ins.pop_back();
         c.g.node("Clip", ins, {c.out});
       }},
      {"to",
       [](OpCtx& c) {
         if (c.dtype(0) == c.out_dtype()) c.g.node("Identity", {c.in[0]}, {c.out});
         else set_int(c.g.node("Cast", {c.in[0]}, {c.out}), "to", onnx_type(c.out_dtype()));
       }},
      {"contiguous", [](OpCtx& c) { c.g.node("Identity", {c.in[0]}, {c.out}); }},
      {"clone", [](OpCtx& c) { c.g.node("Identity", {c.in[0]}, {c.out}); }},
      // ---- shapes ----
      {"view", [](OpCtx& c) { c.g.node("Reshape", {c.in[0], reshape_target(c)}, {c.out}); }},
      {"expand",
       [](OpCtx& c) {  // a dim the input already has keeps its (maybe dynamic) size through a 1
         const Shape &s1 = c.out_shape(), &s2 = c.out_shape2(), &i1 = c.shape(0), &i2 = c.shape2(0);
         const size_t lead = s1.size() - i1.size();
         std::vector<int64_t> t(s1.size());
         for (size_t i = 0; i < s1.size(); ++i) {
           const bool kept = i >= lead && i1[i - lead] == s1[i] && i2[i - lead] == s2[i];
           if (kept) t[i] = 1;
           else if (s1[i] == s2[i]) t[i] = s1[i];
           else c.fail(str("expands to a size that follows a dynamic axis (", s1, " vs ", s2, ")"));
         }
         c.g.node("Expand", {c.in[0], c.g.ints(t)}, {c.out});
       }},
      {"permute", [](OpCtx& c) { set_ints(c.g.node("Transpose", {c.in[0]}, {c.out}), "perm", c.e.attr_ints("dims")); }},
      {"slice",
       [](OpCtx& c) {
         const int64_t d = c.e.attr_int("dim"), step = c.e.attr_int("step");
         // A bound that changes between the traces: the end of a dim that follows a dynamic axis
         // (to INT64_MAX), or a dynamic size of the inputs (x[:T] of a table, T the sequence).
         auto bound = [&](const char* name) {
           const int64_t v1 = c.e.attr_int(name), v2 = c.e2.attr_int(name);
           if (v1 == v2) return c.g.ints({v1});
           if (v1 == c.shape(0)[size_t(d)] && v2 == c.shape2(0)[size_t(d)]) return c.g.ints({INT64_MAX});
           return c.dynamic_size(v1, v2, name);
         };
         c.g.node("Slice", {c.in[0], bound("start"), bound("end"), c.g.ints({d}), c.g.ints({step})}, {c.out});
       }},
      {"select",
       [](OpCtx& c) {
         const int64_t d = c.e.attr_int("dim");
         set_int(c.g.node("Gather", {c.in[0], c.g.constant(full({}, c.e.attr_int("index"), DType::i64), "index")}, {c.out}),
                 "axis", d);
       }},
      {"cat",
       [](OpCtx& c) {
         std::vector<std::string> ins;
         for (size_t i = 0; i < c.in.size(); ++i)
           if (!(c.shape(i).size() == 1 && c.shape(i)[0] == 0 && c.out_shape().size() != 1))  // legacy [0] skips
             ins.push_back(c.as(i, c.out_dtype()));
         set_int(c.g.node("Concat", ins, {c.out}), "axis", c.e.attr_int("dim"));
       }},
      // ---- reductions ----
      {"sum",
       [](OpCtx& c) {
         const std::vector<int64_t>& dims = c.e.attr_ints("dims");
         std::vector<std::string> ins = {c.as(0, c.out_dtype())};
         if (!dims.empty()) ins.push_back(c.g.ints(dims));
         set_int(c.g.node("ReduceSum", ins, {c.out}), "keepdims", c.e.attr_int("keepdim"));
       }},
      {"mean",
       [](OpCtx& c) {
         const std::vector<int64_t>& dims = c.e.attr_ints("dims");
         onnx::NodeProto* n = c.g.node("ReduceMean", {c.as(0, c.out_dtype())}, {c.out});
         if (!dims.empty()) set_ints(n, "axes", dims);
         set_int(n, "keepdims", c.e.attr_int("keepdim"));
       }},
      {"softmax", [](OpCtx& c) { set_int(c.g.node("Softmax", {c.in[0]}, {c.out}), "axis", c.e.attr_int("dim")); }},
      {"log_softmax", [](OpCtx& c) { set_int(c.g.node("LogSoftmax", {c.in[0]}, {c.out}), "axis", c.e.attr_int("dim")); }},
      // ---- layers ----
      {"linear",
       [](OpCtx& c) { linear(c, c.in[0], int64_t(c.shape(0).size()), c.in[1], c.has(2) ? c.in[2] : "", c.out); }},
      {"gelu_mlp",
       [](OpCtx& c) {  // linear(gelu_tanh(linear(x, fc_w, fc_b)), proj_w, proj_b)
         const int64_t rank = int64_t(c.shape(0).size());
         std::string h = gelu(c, linear(c, c.in[0], rank, c.in[1], c.has(2) ? c.in[2] : ""), true, c.out_dtype());
         linear(c, h, rank, c.in[3], c.has(4) ? c.in[4] : "", c.out);
       }},
      {"residual_add", [](OpCtx& c) { elementwise(c, "Add"); }},
      {"scaled_dot_product_attention",
       [](OpCtx& c) {  // q, k, v [B, H, T, D] (and a mask)
         if (c.e.has_attr("dropout_p") && c.e.attr_double("dropout_p") > 0)
           c.fail("has dropout (a training-time op): export in eval mode or with dropout_p 0");
         if (c.shape(0).size() != 4) c.fail(str("takes q of shape ", c.shape(0), "; the export handles [B, H, T, D]"));
         const bool masked = c.has(3);
         attention(c, c.in[0], c.in[1], c.in[2], c.shape(0)[3], masked ? c.in[3] : "",
                   masked ? c.dtype(3) : DType::b8, c.e.attr_int("causal"), c.e.attr_double("scale"), c.out_dtype(),
                   c.out);
       }},
      {"scaled_dot_product_attention_packed",
       [](OpCtx& c) {  // qkv [B, T, 3C] -> heads [B, H, T, D] -> attention -> y [B, T, C]
         const int64_t heads = c.e.attr_int("n_head"), width = c.shape(0)[2] / 3, head_dim = width / heads;
         std::string split = c.g.op("Reshape", {c.in[0], c.g.ints({0, 0, 3, heads, head_dim})});
         onnx::NodeProto* t = c.g.node("Transpose", {split}, {c.g.fresh("qkv_heads")});
         set_ints(t, "perm", {2, 0, 3, 1, 4});  // [3, B, H, T, D]
         auto part = [&](int64_t i) {
           onnx::NodeProto* n = c.g.node("Gather", {t->output(0), c.g.constant(full({}, i, DType::i64), "index")},
                                         {c.g.fresh("head_part")});
           set_int(n, "axis", 0);
           return n->output(0);
         };
         std::string y = attention(c, part(0), part(1), part(2), head_dim, "", DType::b8, c.e.attr_int("causal"),
                                   c.e.attr_double("scale"), c.out_dtype(), c.g.fresh("attention_out"));
         onnx::NodeProto* back = c.g.node("Transpose", {y}, {c.g.fresh("merged")});
         set_ints(back, "perm", {0, 2, 1, 3});
         c.g.node("Reshape", {back->output(0), c.g.ints({0, 0, width})}, {c.out});
       }},
      {"full",
       [](OpCtx& c) {  // a fill: the value expanded to the shape, sizes that follow a dynamic axis read off the input
         const std::vector<int64_t>& s1 = c.e.attr_ints("shape");
         const std::vector<int64_t>& s2 = c.e2.attr_ints("shape");
         std::vector<std::string> pieces;
         for (size_t d = 0; d < s1.size(); ++d)
           pieces.push_back(s1[d] == s2[d] ? c.g.ints({s1[d]}) : c.dynamic_size(s1[d], s2[d], "size"));
         std::string shape = c.g.ints({});
         if (pieces.size() == 1) shape = pieces[0];
         if (pieces.size() > 1) {
           onnx::NodeProto* cat = c.g.node("Concat", pieces, {c.g.fresh("shape")});
           set_int(cat, "axis", 0);
           shape = cat->output(0);
         }
         c.g.node("Expand", {c.g.scalar(c.e.attr_double("value"), c.out_dtype()), shape}, {c.out});
       }},
      {"arange",
       [](OpCtx& c) {  // Range(start, limit, delta); a limit that follows a dynamic axis is read off the input
         const DType dt = c.out_dtype();
         auto bound = [&](const char* name) {
           const double v1 = c.e.attr_double(name), v2 = c.e2.attr_double(name);
           if (v1 == v2) return c.g.scalar(v1, dt);
           if (v1 != std::floor(v1) || v2 != std::floor(v2)) c.fail(str("has a fractional ", name, " that follows a dynamic axis"));
           std::string size = scalar_of(c, c.dynamic_size(int64_t(v1), int64_t(v2), name));
           if (dt == DType::i64) return size;
           onnx::NodeProto* n = c.g.node("Cast", {size}, {c.g.fresh("cast")});
           set_int(n, "to", onnx_type(dt));
           return n->output(0);
         };
         c.g.node("Range", {bound("start"), bound("end"), bound("step")}, {c.out});
       }},
      {"lstm_layer", [](OpCtx& c) { rnn_layer(c, true); }},
      {"gru_layer", [](OpCtx& c) { rnn_layer(c, false); }},
      {"conv_transpose2d",
       [](OpCtx& c) { set_ints(conv(c, "ConvTranspose"), "output_padding", c.e.attr_ints("output_padding")); }},
      {"swiglu",
       [](OpCtx& c) {  // silu(gate) * up
         c.g.node("Mul", {c.g.op("Mul", {c.in[0], c.g.op("Sigmoid", {c.in[0]})}), c.in[1]}, {c.out});
       }},
      {"rotary_embedding",
       [](OpCtx& c) {  // x [B, T, H, D], cos and sin [T, D/2] (ember/ops/rope.h: rotate_half)
         const int64_t half = c.shape(0)[3] / 2;
         const DType dt = c.out_dtype();
         auto table = [&](size_t i) {  // [T, 1, D/2], in x's dtype
           return c.g.op("Unsqueeze", {c.as(i, dt), c.g.ints({1})});
         };
         std::string cos = table(1), sin = table(2);
         std::string x1 = c.g.op("Slice", {c.in[0], c.g.ints({0}), c.g.ints({half}), c.g.ints({3})});
         std::string x2 = c.g.op("Slice", {c.in[0], c.g.ints({half}), c.g.ints({2 * half}), c.g.ints({3})});
         std::string lo = c.g.op("Sub", {c.g.op("Mul", {x1, cos}), c.g.op("Mul", {x2, sin})});
         std::string hi = c.g.op("Add", {c.g.op("Mul", {x2, cos}), c.g.op("Mul", {x1, sin})});
         set_int(c.g.node("Concat", {lo, hi}, {c.out}), "axis", 3);
       }},
      {"matmul", [](OpCtx& c) { c.g.node("MatMul", {c.in[0], c.in[1]}, {c.out}); }},
      {"conv2d", [](OpCtx& c) { conv(c, "Conv"); }},
      {"max_pool2d",
       [](OpCtx& c) {
         onnx::NodeProto* n = c.g.node("MaxPool", {c.in[0]}, {c.out});
         set_ints(n, "kernel_shape", c.e.attr_ints("kernel_size"));
         set_ints(n, "strides", c.e.attr_ints("stride"));
         set_ints(n, "pads", pads4(c.e.attr_ints("padding")));
       }},
      {"avg_pool2d",
       [](OpCtx& c) {
         if (c.e.attr_int("divisor_override") != 0) c.fail("has a divisor_override, which ONNX's AveragePool lacks");
         onnx::NodeProto* n = c.g.node("AveragePool", {c.in[0]}, {c.out});
         set_ints(n, "kernel_shape", c.e.attr_ints("kernel_size"));
         set_ints(n, "strides", c.e.attr_ints("stride"));
         set_ints(n, "pads", pads4(c.e.attr_ints("padding")));
         set_int(n, "ceil_mode", c.e.attr_int("ceil_mode"));
         set_int(n, "count_include_pad", c.e.attr_int("count_include_pad"));
       }},
      {"adaptive_avg_pool2d",
       [](OpCtx& c) {
         const int64_t oh = c.out_shape()[2], ow = c.out_shape()[3];
         if (oh == 1 && ow == 1) {
           c.g.node("GlobalAveragePool", {c.in[0]}, {c.out});
           return;
         }
         const int64_t h = c.static_dim(0, 2, "height"), w = c.static_dim(0, 3, "width");
         if (h % oh || w % ow)
           c.fail(str("pools ", h, "x", w, " to ", oh, "x", ow, ": only an output that divides the input "
                      "(equal windows) is an ONNX AveragePool"));
         onnx::NodeProto* n = c.g.node("AveragePool", {c.in[0]}, {c.out});
         set_ints(n, "kernel_shape", {h / oh, w / ow});
         set_ints(n, "strides", {h / oh, w / ow});
       }},
      {"embedding",
       [](OpCtx& c) { set_int(c.g.node("Gather", {c.in[0], c.in[1]}, {c.out}), "axis", 0); }},
      {"batch_norm",
       [](OpCtx& c) {  // inputs x, running_mean, running_var, weight, bias
         if (c.e.attr_int("training")) c.fail("runs in training mode (batch statistics); export a module in eval()");
         if (!c.has(1) || !c.has(2))
           c.fail("has no running statistics (track_running_stats=false): it normalizes by the batch's own");
         const int64_t ch = c.shape(0)[1];
         const DType dt = c.dtype(0);
         std::string w = c.has(3) ? c.in[3] : c.g.constant(ones({ch}, dt), "ones");
         std::string b = c.has(4) ? c.in[4] : c.g.constant(zeros({ch}, dt), "zeros");
         set_float(c.g.node("BatchNormalization", {c.in[0], w, b, c.in[1], c.in[2]}, {c.out}), "epsilon",
                   c.e.attr_double("eps"));
       }},
      {"layer_norm", layer_norm},
      {"residual_layer_norm", layer_norm},
      {"rms_norm",
       [](OpCtx& c) {  // x / sqrt(mean(x^2 over the normalized dims) + eps) * w (opset 17 has no RMSNormalization)
         const int64_t k = int64_t(c.e.attr_ints("normalized_shape").size());
         std::vector<int64_t> axes;
         for (int64_t d = -k; d < 0; ++d) axes.push_back(d);
         const std::string& x = c.in[0];
         onnx::NodeProto* ms = c.g.node("ReduceMean", {c.g.op("Mul", {x, x})}, {c.g.fresh("mean_square")});
         set_ints(ms, "axes", axes);
         set_int(ms, "keepdims", 1);
         std::string rms = c.g.op("Sqrt", {c.g.op("Add", {ms->output(0), c.g.scalar(c.e.attr_double("eps"), c.dtype(0))})});
         if (!c.has(1)) {
           c.g.node("Div", {x, rms}, {c.out});
           return;
         }
         c.g.node("Mul", {c.g.op("Div", {x, rms}), c.in[1]}, {c.out});
       }},
      {"group_norm",
       [](OpCtx& c) {  // [N, C, *] -> [N, G, -1] -> InstanceNormalization -> [N, C, *] -> * w + b
         const int64_t groups = c.e.attr_int("num_groups");
         const DType dt = c.dtype(0);
         std::string grouped = c.g.op("Reshape", {c.in[0], c.g.ints({0, groups, -1})});
         onnx::NodeProto* n = c.g.node("InstanceNormalization",
                                       {grouped, c.g.constant(ones({groups}, dt), "ones"), c.g.constant(zeros({groups}, dt), "zeros")},
                                       {c.g.fresh("instance_norm")});
         set_float(n, "epsilon", c.e.attr_double("eps"));
         std::string y = c.g.op("Reshape", {n->output(0), c.g.op("Shape", {c.in[0]})});
         if (c.has(1)) y = channel_affine(c, y, 1, "Mul");
         if (c.has(2)) y = channel_affine(c, y, 2, "Add");
         c.g.node("Identity", {y}, {c.out});
       }},
  };
  return table;
}

// Attribute values alike in both traces (a NaN fill value equals itself).
bool same_value(const trace::AttrValue& a, const trace::AttrValue& b) {
  if (std::holds_alternative<double>(a) && std::holds_alternative<double>(b)) {
    const double x = std::get<double>(a), y = std::get<double>(b);
    return x == y || (std::isnan(x) && std::isnan(y));
  }
  return a == b;
}
bool same_attrs(const std::vector<trace::Attr>& a, const std::vector<trace::Attr>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].name != b[i].name || !same_value(a[i].value, b[i].value)) return false;
  return true;
}

// Ops whose attributes may differ between the traces: their symbolics read both.
bool attrs_may_follow_sizes(const std::string& op) { return op == "slice" || op == "arange" || op == "full"; }

// ---- the traces ----

struct Trace {
  TensorList inputs, outputs;
  std::vector<Event> events;
};

Trace run_traced(const OnnxForward& forward, const TensorList& inputs) {
  trace::Tracer tracer;
  Trace t;
  t.inputs = inputs;
  {
    NoGradGuard no_grad;
    trace::TracingGuard guard(tracer);
    t.outputs = forward(inputs);
  }
  t.events = tracer.events();
  return t;
}

// The second example: other values of the same kind, every dynamic axis one longer.
Tensor second_example(const Tensor& x, const std::map<int64_t, std::string>& axes, Generator& gen) {
  Shape s = x.sizes();
  for (const auto& [d, name] : axes) s[size_t(d)] += 1;
  const TensorOptions o = TensorOptions(x.dtype()).device(x.device());
  if (x.is_floating_point()) return randn(s, o, &gen);
  if (x.dtype() == DType::b8) return to(randint(0, 2, s, TensorOptions(DType::i64), &gen), x.device(), DType::b8);
  // Integers (token ids, class indices): from the example's own range, so they stay valid.
  Tensor h = host_contiguous(to(x, Device::cpu(), DType::i64));
  int64_t lo = 0, hi = 0;
  const int64_t* p = h.data_ptr<int64_t>();
  if (h.numel() > 0) lo = hi = p[0];
  for (int64_t i = 1; i < h.numel(); ++i) lo = std::min(lo, p[i]), hi = std::max(hi, p[i]);
  return to(randint(lo, hi + 1, s, TensorOptions(DType::i64), &gen), x.device(), x.dtype());
}

// Restores every module's train/eval mode.
class EvalGuard {
 public:
  explicit EvalGuard(nn::Module& m) {
    for (auto& [name, mod] : m.named_modules()) modes_.emplace_back(mod, mod->is_training());
    m.eval();
  }
  ~EvalGuard() {
    for (auto& [mod, training] : modes_) mod->train(training);  // train() recurses: parents first is fine
  }

 private:
  std::vector<std::pair<nn::Module*, bool>> modes_;
};

// ---- resolution of the values every op reads ----

struct Value {
  enum Kind { kInput, kParam, kEvent, kConstant } kind;
  size_t index;      // input number / event number
  std::string name;  // its name in the graph (a parameter's state_dict name; set when first written)
  Tensor tensor;     // a parameter's or constant's value
  bool written = false;
};

class Exporter {
 public:
  Exporter(nn::Module& model, const Trace& t1, const Trace& t2, const OnnxExportOptions& o,
           const std::vector<std::string>& input_names, const std::vector<std::string>& output_names)
      : t1_(t1), t2_(t2), options_(o), input_names_(input_names), output_names_(output_names) {
    for (auto& [name, p] : model.named_parameters()) params_.try_emplace(p.impl(), ParamInfo{name, p});
    for (auto& [name, b] : model.named_buffers()) params_.try_emplace(b.impl(), ParamInfo{name, b});
  }

  onnx::ModelProto build() {
    check_same_ops();
    resolve();
    mark_live();
    onnx::ModelProto model;
    model.set_ir_version(kIrVersion);
    model.set_producer_name("ember");
    model.set_producer_version("0.1");
    if (!options_.doc_string.empty()) model.set_doc_string(options_.doc_string);
    onnx::OperatorSetIdProto* opset = model.add_opset_import();
    opset->set_domain("");
    opset->set_version(options_.opset_version);
    onnx::GraphProto* g = model.mutable_graph();
    g->set_name("ember");
    Graph graph(g);
    write_inputs(g);
    write_nodes(graph);
    write_outputs(graph, g);
    if (graph.bytes() > (uint64_t(2) << 30) - (uint64_t(64) << 20))
      throw ValueError(str("[", kOp, "] the model's tensors take ", graph.bytes() >> 20,
                           " MiB, past protobuf's 2 GiB limit for one file (external data is not supported yet)"));
    return model;
  }

 private:
  struct ParamInfo {
    std::string name;
    Tensor tensor;
  };
  struct Known {
    size_t value;
    uint32_t version;
  };

  void check_same_ops() {
    const auto &a = t1_.events, &b = t2_.events;
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
      if (a[i].op != b[i].op || a[i].inputs.size() != b[i].inputs.size())
        throw ValueError(str("[", kOp, "] the forward ran ", describe(a[i], i), " on the example but '", b[i].op,
                             "' there on a second example (other values, dynamic axes one longer): its ops "
                             "depend on the input's values or sizes, which one ONNX graph cannot express"));
      if (!same_attrs(a[i].attrs, b[i].attrs) && !attrs_may_follow_sizes(a[i].op)) {
        for (const trace::Attr& x : a[i].attrs)
          for (const trace::Attr& y : b[i].attrs)
            if (x.name == y.name && !same_value(x.value, y.value))
              throw ValueError(str("[", kOp, "] ", describe(a[i], i), " has attribute '", x.name,
                                   "' that changes with the input's sizes along the dynamic axes: it cannot be "
                                   "exported with those axes dynamic (leave them out of dynamic_axes)"));
        throw ValueError(str("[", kOp, "] ", describe(a[i], i), " has attributes that change with the input's sizes"));
      }
    }
    if (a.size() != b.size())
      throw ValueError(str("[", kOp, "] the forward ran ", uint64_t(a.size()), " ops on the example and ",
                           uint64_t(b.size()), " on a second example (other values, dynamic axes one longer): "
                           "its ops depend on the input's values or sizes, which one ONNX graph cannot express"));
  }

  // Which value a tensor read by op `consumer` (or by the graph's outputs) is.
  size_t value_of(const Tensor& a, const Tensor& b, uint32_t version, const std::string& consumer) {
    const TensorImpl* key = a.impl();
    if (auto it = known_.find(key); it != known_.end()) {
      if (it->second.version != version)
        throw ValueError(str("[", kOp, "] ", consumer, " reads a tensor that was modified in place after it was "
                             "produced, by an op the exporter cannot see (use the op's out-of-place form)"));
      return it->second.value;
    }
    if (auto it = params_.find(key); it != params_.end()) {
      if (it->second.tensor.version() != version)
        throw ValueError(str("[", kOp, "] ", consumer, " reads parameter or buffer '", it->second.name,
                             "' after the forward modified it in place"));
      values_.push_back(Value{Value::kParam, 0, it->second.name, it->second.tensor});
      known_[key] = Known{values_.size() - 1, version};
      return values_.size() - 1;
    }
    if (!same_bits(a, b))
      throw ValueError(str("[", kOp, "] ", consumer, " reads a tensor that no exported op produced and that differs "
                           "between two traces (other input values, dynamic axes one longer): it was computed from "
                           "the inputs by an op the exporter cannot trace (argmax, sorting, indexing, random "
                           "factories) or sized by a dynamic axis"));
    values_.push_back(Value{Value::kConstant, 0, {}, a});
    known_[key] = Known{values_.size() - 1, version};
    return values_.size() - 1;
  }

  void resolve() {
    for (size_t i = 0; i < t1_.inputs.size(); ++i) {
      values_.push_back(Value{Value::kInput, i, input_names_[i], {}, true});
      known_[t1_.inputs[i].impl()] = Known{i, t1_.inputs[i].version()};
    }
    event_inputs_.resize(t1_.events.size());
    event_value_.resize(t1_.events.size());
    for (size_t i = 0; i < t1_.events.size(); ++i) {
      const Event &e = t1_.events[i], &e2 = t2_.events[i];
      const std::string who = describe(e, i);
      for (size_t j = 0; j < e.inputs.size(); ++j) {
        if (!e.inputs[j].defined()) {
          event_inputs_[i].push_back(SIZE_MAX);
          continue;
        }
        event_inputs_[i].push_back(value_of(e.inputs[j], e2.inputs[j], e.input_versions[j], who));
      }
      values_.push_back(Value{Value::kEvent, i, {}, {}});
      event_value_[i] = values_.size() - 1;
      known_[e.output.impl()] = Known{values_.size() - 1, e.output_version};
    }
    for (size_t k = 0; k < t1_.outputs.size(); ++k) {
      EMBER_CHECK(t1_.outputs[k].defined(), ValueError, "[", kOp, "] output ", uint64_t(k), " of the forward is undefined");
      output_values_.push_back(value_of(t1_.outputs[k], t2_.outputs[k], t1_.outputs[k].version(),
                                        str("output '", output_names_[k], "'")));
    }
  }

  void mark_live() {
    live_.assign(t1_.events.size(), false);
    std::vector<size_t> stack(output_values_.begin(), output_values_.end());
    while (!stack.empty()) {
      const Value& v = values_[stack.back()];
      stack.pop_back();
      if (v.kind != Value::kEvent || live_[v.index]) continue;
      live_[v.index] = true;
      for (size_t in : event_inputs_[v.index])
        if (in != SIZE_MAX) stack.push_back(in);
    }
  }

  const std::string& name_of(Graph& g, size_t value) {
    Value& v = values_[value];
    if (!v.written) {
      v.written = true;
      if (v.kind == Value::kConstant) v.name = g.constant(v.tensor);
      else if (v.kind == Value::kParam) g.initializer(v.name, v.tensor);
      else if (v.kind == Value::kEvent && v.name.empty()) v.name = g.fresh(t1_.events[v.index].op);
    }
    return v.name;
  }

  void write_nodes(Graph& g) {
    // A graph output produced by an op is written under the output's name.
    for (size_t k = 0; k < output_values_.size(); ++k) {
      Value& v = values_[output_values_[k]];
      if (v.kind == Value::kEvent && !v.written) v.name = output_names_[k], v.written = true;
    }
    const auto& table = symbolics();
    for (size_t i = 0; i < t1_.events.size(); ++i) {
      if (!live_[i]) continue;
      const Event& e = t1_.events[i];
      auto it = table.find(e.op);
      if (it == table.end())
        throw ValueError(str("[", kOp, "] ", describe(e, i), " has no ONNX export yet"));
      OpCtx c{g, e, t2_.events[i], i, {}, {}, t1_.inputs, t2_.inputs, input_names_, options_};
      for (size_t in : event_inputs_[i]) c.in.push_back(in == SIZE_MAX ? std::string() : name_of(g, in));
      c.out = name_of(g, event_value_[i]);
      it->second(c);
    }
  }

  void set_type(onnx::ValueInfoProto* vi, const std::string& name, const Tensor& a, const Tensor& b,
                const std::map<int64_t, std::string>& axes) {
    vi->set_name(name);
    onnx::TypeProto_Tensor* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx_type(a.dtype()));
    onnx::TensorShapeProto* shape = tt->mutable_shape();
    for (int64_t d = 0; d < a.dim(); ++d) {
      onnx::TensorShapeProto_Dimension* dim = shape->add_dim();
      auto named = axes.find(d);
      if (named != axes.end()) dim->set_dim_param(named->second);
      else if (a.sizes()[size_t(d)] == b.sizes()[size_t(d)]) dim->set_dim_value(a.sizes()[size_t(d)]);
      else dim->set_dim_param(dynamic_name(name, d, a.sizes()[size_t(d)], b.sizes()[size_t(d)]));
    }
  }

  // An output dim that follows a dynamic input axis takes its name.
  std::string dynamic_name(const std::string& output, int64_t d, int64_t s1, int64_t s2) const {
    for (size_t i = 0; i < t1_.inputs.size(); ++i) {
      auto axes = options_.dynamic_axes.find(input_names_[i]);
      if (axes == options_.dynamic_axes.end()) continue;
      for (const auto& [axis, name] : axes->second)
        if (t1_.inputs[i].sizes()[size_t(axis)] == s1 && t2_.inputs[i].sizes()[size_t(axis)] == s2) return name;
    }
    return str(output, "_dim", d);
  }

  void write_inputs(onnx::GraphProto* g) {
    for (size_t i = 0; i < t1_.inputs.size(); ++i) {
      auto axes = options_.dynamic_axes.find(input_names_[i]);
      set_type(g->add_input(), input_names_[i], t1_.inputs[i], t2_.inputs[i],
               axes == options_.dynamic_axes.end() ? std::map<int64_t, std::string>{} : axes->second);
    }
  }

  void write_outputs(Graph& g, onnx::GraphProto* gp) {
    for (size_t k = 0; k < output_values_.size(); ++k) {
      const std::string& produced = name_of(g, output_values_[k]);
      // An input, a parameter or a constant returned as it is, or one value returned twice.
      if (produced != output_names_[k]) g.node("Identity", {produced}, {output_names_[k]});
      auto axes = options_.dynamic_axes.find(output_names_[k]);
      set_type(gp->add_output(), output_names_[k], t1_.outputs[k], t2_.outputs[k],
               axes == options_.dynamic_axes.end() ? std::map<int64_t, std::string>{} : axes->second);
    }
  }

  const Trace& t1_;
  const Trace& t2_;
  const OnnxExportOptions& options_;
  const std::vector<std::string>& input_names_;
  const std::vector<std::string>& output_names_;
  std::unordered_map<const TensorImpl*, ParamInfo> params_;
  std::unordered_map<const TensorImpl*, Known> known_;
  std::vector<Value> values_;
  std::vector<std::vector<size_t>> event_inputs_;
  std::vector<size_t> event_value_;
  std::vector<size_t> output_values_;
  std::vector<bool> live_;
};

std::vector<std::string> default_names(std::vector<std::string> given, size_t n, const char* base, const char* what) {
  if (given.empty()) {
    if (n == 1) return {base};
    for (size_t i = 0; i < n; ++i) given.push_back(str(base, "_", uint64_t(i)));
    return given;
  }
  EMBER_CHECK(given.size() == n, ValueError, "[", kOp, "] ", uint64_t(given.size()), " ", what,
              " names for ", uint64_t(n), " ", what, "s");
  return given;
}

void check_model(const onnx::ModelProto& model) {
  try {
    onnx::checker::check_model(model);
    onnx::ModelProto inferred = model;
    onnx::shape_inference::InferShapes(inferred, onnx::OpSchemaRegistry::Instance(),
                                       onnx::ShapeInferenceOptions(/*check_type=*/true, /*strict=*/1));
  } catch (const std::exception& e) {
    throw ValueError(str("[", kOp, "] internal error: the exported graph fails ONNX's checker (please report it): ",
                         e.what()));
  }
}

}  // namespace

bool onnx_export_available() { return true; }

void export_onnx(nn::Module& model, const OnnxForward& forward, const TensorList& example_inputs,
                 const std::string& path, const OnnxExportOptions& options) {
  EMBER_CHECK(options.opset_version == 17, ValueError, "[", kOp, "] opset_version ", options.opset_version,
              " is not supported: ember writes opset 17");
  EMBER_CHECK(!example_inputs.empty(), ValueError, "[", kOp, "] needs at least one example input");
  const std::vector<std::string> input_names = default_names(options.input_names, example_inputs.size(), "input", "input");
  for (size_t i = 0; i < example_inputs.size(); ++i)
    EMBER_CHECK(example_inputs[i].defined(), ValueError, "[", kOp, "] example input ", uint64_t(i), " is undefined");
  for (const auto& [name, axes] : options.dynamic_axes) {
    auto it = std::find(input_names.begin(), input_names.end(), name);
    if (it == input_names.end()) continue;  // an output's (checked once the outputs are known)
    const Tensor& x = example_inputs[size_t(it - input_names.begin())];
    for (const auto& [d, axis_name] : axes)
      EMBER_CHECK(d >= 0 && d < x.dim(), ValueError, "[", kOp, "] dynamic axis ", d, " of input '", name,
                  "' is out of range for its ", x.dim(), " dims (give dims as 0 .. dim-1)");
  }

  EvalGuard eval(model);
  // Fresh tensors for the inputs: two inputs that are one tensor must stay two graph inputs.
  TensorList first, second;
  Generator gen(0x0ee7);
  for (size_t i = 0; i < example_inputs.size(); ++i) {
    NoGradGuard no_grad;
    first.push_back(clone(example_inputs[i].detach()));
    auto axes = options.dynamic_axes.find(input_names[i]);
    second.push_back(second_example(example_inputs[i], axes == options.dynamic_axes.end() ? std::map<int64_t, std::string>{} : axes->second, gen));
  }
  {  // A first call untraced: what a module builds and caches on first use (Llama's rotary
     // tables) must not make the two traces differ.
    NoGradGuard no_grad;
    forward(first);
  }
  const Trace t1 = run_traced(forward, first);
  Trace t2;
  try {
    t2 = run_traced(forward, second);
  } catch (const Error& e) {
    throw ValueError(str("[", kOp, "] the forward failed on a second example made to find the dynamic sizes (other "
                         "values; each dynamic axis one longer): ", e.what(), "; give an example that is shorter "
                         "along its dynamic axes"));
  }
  EMBER_CHECK(t1.outputs.size() == t2.outputs.size() && !t1.outputs.empty(), ValueError, "[", kOp,
              "] the forward returned ", uint64_t(t1.outputs.size()), " outputs, then ", uint64_t(t2.outputs.size()));
  const std::vector<std::string> output_names = default_names(options.output_names, t1.outputs.size(), "output", "output");
  for (const auto& [name, axes] : options.dynamic_axes)
    EMBER_CHECK(std::find(input_names.begin(), input_names.end(), name) != input_names.end() ||
                    std::find(output_names.begin(), output_names.end(), name) != output_names.end(),
                ValueError, "[", kOp, "] dynamic_axes names '", name, "', which is no input or output name");

  onnx::ModelProto proto = Exporter(model, t1, t2, options, input_names, output_names).build();
  check_model(proto);
  std::string bytes;
  EMBER_CHECK(proto.SerializeToString(&bytes), IOError, "[", kOp, "] protobuf could not serialize the model");
  detail::write_file_atomic(path, kOp, [&](detail::File& f) { f.write_all(bytes.data(), bytes.size()); });
}

void export_onnx(nn::Module& model, const Tensor& example_input, const std::string& path,
                 const OnnxExportOptions& options) {
  export_onnx(
      model, [&](const TensorList& in) { return TensorList{model(in[0])}; }, {example_input}, path, options);
}

}  // namespace ember::io
