// How a differentiable op is declared: compute the forward with ops:: kernels, then call
// record(name, output, {inputs...}, vjp). When no input requires grad (or grad mode is off)
// record returns the output untouched and the VJP is never stored. The VJP receives the
// output's gradient (and, if it takes a second parameter, the output itself) and returns one
// gradient per input, written with ember's differentiable ops so double backward works.
//
//   Tensor exp(const Tensor& x) {
//     return record("exp", ops::unary(ops::UnaryOp::exp, x), {x},
//                   [](const Tensor& g, const Tensor& y) -> TensorList { return {g * y}; });
//   }
//
// With a Tracer on the thread (an export), record also reports the op (Note [tracing]).
//
// Tensors a VJP needs are captured as Saved (save(x)): a saved input keeps its graph history
// (double backward needs it), the saved output is stored detached (no reference cycle), and
// both detect in-place modification between forward and backward.
#pragma once

#include <optional>
#include <type_traits>
#include <utility>

#include "ember/autograd/node.h"
#include "ember/trace.h"
#include "ember/grad_mode.h"

namespace ember::autograd {

class Saved {
 public:
  Saved() = default;
  explicit Saved(const Tensor& t);
  // The saved tensor; throws AutogradError if it was modified in place since it was saved.
  const Tensor& get() const;
  operator const Tensor&() const { return get(); }
  const Tensor* operator->() const { return &get(); }
  bool defined() const { return tensor_.defined(); }

 private:
  Tensor tensor_;
  uint32_t version_ = 0;
};
inline Saved save(const Tensor& t) { return Saved(t); }

// An input of record(): a reference, so the no-grad path copies no handles (each copy of a
// Tensor is an atomic reference-count update, and this path runs once per op).
struct TensorRef {
  const Tensor& tensor;
  TensorRef(const Tensor& t) : tensor(t) {}
  operator const Tensor&() const { return tensor; }
};

// True when an op on these inputs must record a node.
template <class Range>
bool needs_grad(const Range& inputs) {
  if (!GradMode::is_enabled()) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

// Inside a VJP: whether input i's gradient will be used (skip computing it otherwise, e.g.
// the input-gradient GEMM of a first layer whose input is data).
bool needs_input_grad(size_t i);

namespace detail {
// Marks the node whose VJP is running, for needs_input_grad (RAII).
class RunningNode {
 public:
  explicit RunningNode(const Node* n);
  ~RunningNode();
  RunningNode(const RunningNode&) = delete;
  RunningNode& operator=(const RunningNode&) = delete;

 private:
  const Node* prev_;
};

// Non-template part of recording: connects `node` to `inputs` and makes it `output`'s grad_fn.
Tensor attach(std::shared_ptr<Node> node, const Tensor& output, const TensorList& inputs);
// A view of `t` whose grad_fn is `node` (double backward through a saved output).
Tensor with_grad_fn(const Tensor& t, std::shared_ptr<Node> node);
// Validates one VJP result against its input (shape, device) and casts it to the input dtype.
Tensor check_grad(const char* op, size_t index, Tensor grad, const Shape& sizes, DType dtype,
                  Device device);

template <class Vjp>
class FunctionNode final : public Node {
 public:
  static constexpr bool kWantsOutput =
      std::is_invocable_v<Vjp, const Tensor&, const Tensor&>;

  FunctionNode(const char* name, Vjp vjp, const TensorList& inputs, const Tensor& output)
      : name_(name), vjp_(std::move(vjp)) {
    inputs_meta_.reserve(inputs.size());
    for (const Tensor& t : inputs)
      inputs_meta_.push_back(t.defined() ? Meta{t.sizes(), t.dtype(), t.device()} : Meta{});
    // The output is saved detached: a strong reference to it would form a cycle through
    // its grad_fn (this node). apply() reattaches it when double backward needs its graph.
    if constexpr (kWantsOutput) output_ = Saved(output.detach());
  }
  TensorList apply(Tensor grad) override {
    if (!vjp_)
      throw AutogradError(str("[", name_, "] trying to backward through the graph a second time "
                              "(its saved tensors were freed); pass retain_graph=true to the "
                              "first backward"));
    TensorList grads;
    RunningNode running(this);
    if constexpr (kWantsOutput) {
      Tensor y = output_.get();
      if (GradMode::is_enabled()) y = with_grad_fn(y, shared_from_this());
      grads = (*vjp_)(grad, y);
    } else {
      grads = (*vjp_)(grad);
    }
    if (grads.size() != inputs_meta_.size())
      throw AutogradError(str("[", name_, "] VJP returned ", uint64_t(grads.size()),
                              " gradients for ", uint64_t(inputs_meta_.size()), " inputs"));
    for (size_t i = 0; i < grads.size(); ++i)
      if (next_edges[i] && grads[i].defined())
        grads[i] = check_grad(name_, i, std::move(grads[i]), inputs_meta_[i].sizes,
                              inputs_meta_[i].dtype, inputs_meta_[i].device);
    return grads;
  }
  const char* name() const override { return name_; }
  void release() override {
    vjp_.reset();
    output_ = Saved();
  }

 private:
  struct Meta {
    Shape sizes;
    DType dtype = DType::f32;
    Device device;
  };
  const char* name_;
  std::optional<Vjp> vjp_;
  Saved output_;
  std::vector<Meta> inputs_meta_;
};
}  // namespace detail

// The inputs are an initializer list so that the no-grad path allocates nothing.
template <class Vjp>
Tensor record(const char* name, Tensor output, std::initializer_list<TensorRef> inputs, Vjp&& vjp) {
  if (trace::active()) [[unlikely]]
    trace::t_tracer->record_node(name, output, TensorList(inputs.begin(), inputs.end()));
  if (!needs_grad(inputs)) return output;
  TensorList in(inputs.begin(), inputs.end());
  using Fn = detail::FunctionNode<std::decay_t<Vjp>>;
  // Node blocks come from the small-object lists (ember/storage.h), as tensor impls do.
  auto node = std::allocate_shared<Fn>(ember::detail::SmallObjectAllocator<Fn>{}, name, std::forward<Vjp>(vjp), in, output);
  return detail::attach(std::move(node), output, in);
}
// For ops with a variable number of inputs (cat, stack).
template <class Vjp>
Tensor record(const char* name, Tensor output, const TensorList& inputs, Vjp&& vjp) {
  if (trace::active()) [[unlikely]] trace::t_tracer->record_node(name, output, inputs);
  if (!needs_grad(inputs)) return output;
  using Fn = detail::FunctionNode<std::decay_t<Vjp>>;
  auto node = std::allocate_shared<Fn>(ember::detail::SmallObjectAllocator<Fn>{}, name, std::forward<Vjp>(vjp), inputs, output);
  return detail::attach(std::move(node), output, inputs);
}

}  // namespace ember::autograd
