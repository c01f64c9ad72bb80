// The backward engine: dependency counting from the roots, then a ready queue ordered by
// sequence number (latest node first), with one gradient buffer per node. Single-threaded:
// CPU kernels parallelize inside, and CUDA kernels are asynchronous anyway.
#include "ember/autograd/engine.h"

#include <atomic>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "ember/autocast_state.h"
#include "ember/autograd/anomaly.h"
#include "ember/autograd/function.h"
#include "ember/functions.h"
#include "ember/ops/elementwise.h"
#include "ember/profiler.h"
#include "ember/random.h"

namespace ember::autograd {

namespace {
std::atomic<uint64_t> next_sequence_nr{0};

// A gradient hook may replace the values of a gradient, not its shape, dtype or device (as
// PyTorch); named here, not by whichever op would meet the mismatch later ("[reshape]").
Tensor checked_hook_result(Tensor r, const Tensor& g, const std::string& of) {
  EMBER_CHECK(r.sizes() == g.sizes() && r.dtype() == g.dtype() && r.device() == g.device(), ValueError,
              "[backward] a gradient hook of ", of, " returned a ", r.dtype(), " gradient of shape ", r.sizes(),
              " on ", r.device(), " for a ", g.dtype(), " gradient of shape ", g.sizes(), " on ", g.device(),
              " (a hook may change the values, not the shape, dtype or device)");
  return r;
}

Tensor ones_like_(const Tensor& t) {
  Tensor o = ember::detail::make_tensor(t.sizes(), t.dtype(), t.device());
  ops::fill_(o, 1);
  return o;
}

// Adds a gradient contribution into a node's buffer.
void accumulate_into(Tensor& buffer, Tensor grad) {
  if (!buffer.defined()) {
    buffer = std::move(grad);
  } else if (GradMode::is_enabled()) {
    buffer = ember::add(buffer, grad);  // create_graph: keep the sum differentiable
  } else {
    buffer = ops::binary(ops::BinaryOp::add, buffer, grad);
  }
}

struct ByLatest {
  bool operator()(const Node* a, const Node* b) const { return a->sequence_nr() < b->sequence_nr(); }
};

// Switches autocast off on every device type for its lifetime (restoring each afterwards).
class AutocastOff {
 public:
  AutocastOff()
      : cpu_(autocast::is_enabled(DeviceType::CPU)), cuda_(autocast::is_enabled(DeviceType::CUDA)) {
    if (cpu_) autocast::set_enabled(DeviceType::CPU, false);
    if (cuda_) autocast::set_enabled(DeviceType::CUDA, false);
  }
  ~AutocastOff() {
    if (cpu_) autocast::set_enabled(DeviceType::CPU, true);
    if (cuda_) autocast::set_enabled(DeviceType::CUDA, true);
  }
  AutocastOff(const AutocastOff&) = delete;
  AutocastOff& operator=(const AutocastOff&) = delete;

 private:
  bool cpu_, cuda_;
};

// Runs backward from root nodes. With `captures` non-empty (autograd::grad), the gradients
// reaching those nodes are returned, leaves are not accumulated, and only nodes that lead to
// a capture run.
TensorList run_backward(const std::vector<std::shared_ptr<Node>>& roots, TensorList root_grads,
                        bool retain_graph, bool create_graph,
                        const std::vector<std::shared_ptr<Node>>& captures) {
  AutoGradMode grad_mode(create_graph);
  // Backward runs in the dtypes the forward chose, never re-autocast: a backward() called
  // inside an autocast guard must compute the same gradients as one called outside it.
  AutocastOff autocast_off;
  // As in PyTorch, where retain_graph defaults to create_graph: a differentiable gradient
  // refers to the saved tensors of the forward graph, so freeing them would make the very
  // next (higher-order) backward fail.
  retain_graph = retain_graph || create_graph;
  // Dependency counts over everything reachable from the roots.
  std::unordered_map<Node*, int> deps;
  std::vector<Node*> order;  // discovery order, for the "needed" pass
  {
    std::unordered_set<Node*> seen;
    std::vector<Node*> stack;
    for (auto& r : roots)
      if (r && seen.insert(r.get()).second) stack.push_back(r.get());
    while (!stack.empty()) {
      Node* n = stack.back();
      stack.pop_back();
      order.push_back(n);
      for (auto& e : n->next_edges) {
        if (!e) continue;
        ++deps[e.get()];
        if (seen.insert(e.get()).second) stack.push_back(e.get());
      }
    }
  }
  std::unordered_map<Node*, size_t> capture_index;
  for (size_t i = 0; i < captures.size(); ++i)
    if (captures[i]) capture_index.emplace(captures[i].get(), i);
  // With captures, a node runs only if some capture lies below it (fixed point over edges).
  std::unordered_set<Node*> needed;
  if (!captures.empty()) {
    bool changed = true;
    while (changed) {
      changed = false;
      for (auto it = order.rbegin(); it != order.rend(); ++it) {
        Node* n = *it;
        if (needed.count(n)) continue;
        for (auto& e : n->next_edges)
          if (e && (capture_index.count(e.get()) || needed.count(e.get()))) {
            needed.insert(n);
            changed = true;
            break;
          }
      }
    }
  }

  std::unordered_map<Node*, Tensor> buffers;
  std::priority_queue<Node*, std::vector<Node*>, ByLatest> ready;
  for (size_t i = 0; i < roots.size(); ++i) {
    if (!roots[i]) continue;
    accumulate_into(buffers[roots[i].get()], std::move(root_grads[i]));
  }
  {
    std::unordered_set<Node*> pushed;
    for (auto& r : roots)
      if (r && deps[r.get()] == 0 && pushed.insert(r.get()).second) ready.push(r.get());
  }
  TensorList captured(captures.size());
  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    Tensor g;
    if (auto it = buffers.find(n); it != buffers.end()) {
      g = std::move(it->second);
      buffers.erase(it);
    }
    if (g.defined()) {
      for (auto& hook : n->pre_hooks) {
        Tensor r = hook(g);
        if (r.defined()) g = checked_hook_result(std::move(r), g, std::string("the output of ") + n->name());
      }
    }
    if (auto it = capture_index.find(n); it != capture_index.end()) captured[it->second] = g;
    const bool run = captures.empty() || needed.count(n);
    TensorList grads;
    if (run && g.defined()) {
      {
        auto range = profiler::RecordFunction::backward(n->name());  // Note [profiler hooks]
        grads = n->apply(std::move(g));
      }
      if (is_anomaly_enabled()) detail::check_gradients(*n, grads);
      if (!retain_graph) n->release();
    }
    for (size_t i = 0; i < n->next_edges.size(); ++i) {
      Node* next = n->next_edges[i].get();
      if (!next) continue;
      if (i < grads.size() && grads[i].defined()) accumulate_into(buffers[next], std::move(grads[i]));
      if (--deps[next] == 0) ready.push(next);
    }
  }
  return captured;
}

Tensor root_grad(const Tensor& root, const Tensor& grad, const char* op) {
  if (grad.defined()) {
    EMBER_CHECK(grad.sizes() == root.sizes(), ShapeError, "[", op, "] gradient of shape ",
                grad.sizes(), " given for an output of shape ", root.sizes());
    return grad;
  }
  EMBER_CHECK(root.numel() == 1, AutogradError, "[", op,
              "] a gradient can be implicitly created only for single-element outputs; this "
              "output has shape ", root.sizes(), ", pass a gradient of that shape");
  return ones_like_(root);
}
}  // namespace

Node::Node() : sequence_nr_(next_sequence_nr++) {}

Node::~Node() {
  for (auto& e : next_edges) ember::detail::release_node(std::move(e));
}

std::shared_ptr<Node> gradient_edge(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return nullptr;
  if (t.grad_fn()) return t.grad_fn();
  AutogradMeta& meta = t.impl()->autograd_meta();
  if (auto acc = meta.grad_accumulator.lock()) return acc;
  auto acc = std::make_shared<AccumulateGrad>(t);
  meta.grad_accumulator = acc;
  return acc;
}

TensorList AccumulateGrad::apply(Tensor grad) {
  AutogradMeta& meta = leaf_.impl()->autograd_meta();
  for (auto& hook : meta.hooks) {
    Tensor r = hook(grad);
    if (r.defined()) grad = checked_hook_result(std::move(r), grad, "a leaf");
  }
  Tensor& acc = meta.grad;
  if (!acc.defined()) {
    // Steal the buffer when nothing else can see it; otherwise copy so that .grad never
    // aliases another tensor (it is accumulated into in place later).
    // Both counts matter: handles share an impl (a caller's gradient passed to backward()
    // arrives here as the very impl the caller still holds), views share the storage.
    // A dense channels_last gradient (Note [Memory format]) is kept as it is, as PyTorch keeps
    // a gradient in its parameter's layout.
    bool exclusive = grad.impl_ptr().use_count() == 1 && grad.storage().use_count() == 1 &&
                     (grad.is_contiguous() || grad.is_contiguous(MemoryFormat::channels_last)) &&
                     size_t(grad.numel()) * grad.element_size() == grad.storage()->nbytes();
    if (GradMode::is_enabled()) acc = grad;
    else if (exclusive) acc = grad.detach();
    else acc = ember::clone(grad).detach();
  } else if (GradMode::is_enabled() || ember::detail::has_internal_overlap(acc)) {
    // Out of place under create_graph, and when .grad is an expanded view (kept as the
    // gradient it was, under create_graph): adding into it in place would lose all but one
    // of the adds that share a location.
    acc = ember::add(acc, grad);
  } else {
    ops::binary_out(ops::BinaryOp::add, acc, grad, acc);
  }
  for (auto& hook : meta.post_accumulate_hooks) hook(leaf_);
  return {};
}

Saved::Saved(const Tensor& t) : tensor_(t), version_(t.defined() ? t.version() : 0) {}

const Tensor& Saved::get() const {
  if (tensor_.defined() && tensor_.version() != version_)
    throw AutogradError(str("[backward] a tensor needed for gradient computation (", tensor_,
                            ") was modified by an in-place operation after it was saved (version ",
                            uint64_t(version_), ", now ", uint64_t(tensor_.version()),
                            "); use an out-of-place op or clone() it first"));
  return tensor_;
}

namespace {
EMBER_HOT_TLS thread_local const Node* running_node = nullptr;
}

bool needs_input_grad(size_t i) {
  if (!running_node) return true;
  return i < running_node->next_edges.size() && running_node->next_edges[i] != nullptr;
}

namespace detail {
RunningNode::RunningNode(const Node* n) : prev_(running_node) { running_node = n; }
RunningNode::~RunningNode() { running_node = prev_; }

Tensor attach(std::shared_ptr<Node> node, const Tensor& output, const TensorList& inputs) {
  node->next_edges.reserve(inputs.size());
  for (const Tensor& t : inputs) {
    EMBER_CHECK(!t.defined() || !t.is_same(output), AutogradError, "[", node->name(),
                "] internal error: an op returned its input as its output");
    node->next_edges.push_back(gradient_edge(t));
  }
  // Anomaly mode: remember where this forward was called (off: one thread-local bool test).
  if (is_anomaly_enabled()) [[unlikely]] node->forward_site = capture_forward_site();
  output.impl()->autograd_meta().grad_fn = std::move(node);
  return output;
}

Tensor with_grad_fn(const Tensor& t, std::shared_ptr<Node> node) {
  Tensor v = t.detach();
  v.impl()->autograd_meta().grad_fn = std::move(node);
  return v;
}

Tensor check_grad(const char* op, size_t index, Tensor grad, const Shape& sizes, DType dtype,
                  Device device) {
  EMBER_CHECK(grad.sizes() == sizes, ShapeError, "[", op, "] VJP returned a gradient of shape ",
              grad.sizes(), " for input ", uint64_t(index), " of shape ", sizes);
  EMBER_CHECK(grad.device() == device, DeviceError, "[", op, "] VJP returned a gradient on ",
              grad.device(), " for input ", uint64_t(index), " on ", device);
  if (grad.dtype() != dtype) grad = ember::to(grad, device, dtype);
  return grad;
}
}  // namespace detail

void backward(const TensorList& roots, const TensorList& grads, bool retain_graph,
              bool create_graph) {
  EMBER_CHECK(grads.empty() || grads.size() == roots.size(), ValueError, "[backward] got ",
              uint64_t(roots.size()), " outputs but ", uint64_t(grads.size()), " gradients");
  std::vector<std::shared_ptr<Node>> nodes;
  TensorList root_grads;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    ember::detail::check_defined("backward", r, "output");
    EMBER_CHECK(r.requires_grad(), AutogradError, "[backward] output ", uint64_t(i),
                " (", r, ") does not require grad and has no grad_fn: nothing to differentiate");
    nodes.push_back(gradient_edge(r));
    root_grads.push_back(root_grad(r, grads.empty() ? Tensor() : grads[i], "backward"));
  }
  run_backward(nodes, std::move(root_grads), retain_graph, create_graph, {});
}

TensorList grad(const TensorList& outputs, const TensorList& inputs, const TensorList& grad_outputs,
                bool retain_graph, bool create_graph, bool allow_unused) {
  EMBER_CHECK(grad_outputs.empty() || grad_outputs.size() == outputs.size(), ValueError,
              "[grad] got ", uint64_t(outputs.size()), " outputs but ",
              uint64_t(grad_outputs.size()), " gradients");
  std::vector<std::shared_ptr<Node>> roots, captures;
  TensorList root_grads;
  for (size_t i = 0; i < outputs.size(); ++i) {
    EMBER_CHECK(outputs[i].defined() && outputs[i].requires_grad(), AutogradError,
                "[grad] output ", uint64_t(i), " does not require grad");
    roots.push_back(gradient_edge(outputs[i]));
    root_grads.push_back(root_grad(outputs[i], grad_outputs.empty() ? Tensor() : grad_outputs[i], "grad"));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    EMBER_CHECK(inputs[i].defined() && inputs[i].requires_grad(), AutogradError, "[grad] input ",
                uint64_t(i), " does not require grad");
    captures.push_back(gradient_edge(inputs[i]));
  }
  TensorList result = run_backward(roots, std::move(root_grads), retain_graph, create_graph, captures);
  for (size_t i = 0; i < result.size(); ++i)
    EMBER_CHECK(result[i].defined() || allow_unused, AutogradError, "[grad] input ", uint64_t(i),
                " was not used to compute the outputs (pass allow_unused=true to get an "
                "undefined gradient for it)");
  return result;
}

namespace {

// The autocast state the forward ran under, entered again while checkpoint recomputes it (as
// torch.utils.checkpoint does). Without it a block run under bf16 autocast was recomputed in
// f32 in the backward (the loss's backward runs outside the autocast scope): its gradient
// belonged to another function than the one the forward evaluated, and on CUDA the recomputed
// attention left the tensor-core path (the first GPU run: gpt2-small --recompute at 53K
// tokens/s against 289K without). Mirrors amp::autocast (a guard of a higher layer): nesting
// counted, the weight-cast cache cleared when the outermost scope ends.
class AutocastReplay {
 public:
  struct State {
    bool enabled[2];
    DType dtype[2];
  };
  static State current() {
    State s{};
    for (DeviceType t : {DeviceType::CPU, DeviceType::CUDA}) {
      s.enabled[size_t(t)] = autocast::is_enabled(t);
      s.dtype[size_t(t)] = autocast::get_dtype(t);
    }
    return s;
  }
  explicit AutocastReplay(const State& s) : prev_(current()) {
    apply(s);
    autocast::increment_nesting();
  }
  ~AutocastReplay() {
    apply(prev_);
    if (autocast::decrement_nesting() == 0) autocast::clear_cache();
  }
  AutocastReplay(const AutocastReplay&) = delete;
  AutocastReplay& operator=(const AutocastReplay&) = delete;

 private:
  static void apply(const State& s) {
    for (DeviceType t : {DeviceType::CPU, DeviceType::CUDA}) {
      autocast::set_dtype(t, s.dtype[size_t(t)]);
      autocast::set_enabled(t, s.enabled[size_t(t)]);
    }
  }
  State prev_;
};

}  // namespace

Tensor checkpoint(const std::function<Tensor(const TensorList&)>& fn, const TensorList& inputs) {
  Device device = Device::cpu();
  for (const Tensor& t : inputs)
    if (t.defined() && t.is_cuda()) device = t.device();
  Generator& gen = default_generator(device);
  const Generator::State rng = gen.get_state();
  const AutocastReplay::State amp = AutocastReplay::current();
  Tensor out;
  {
    NoGradGuard no_grad;
    out = fn(inputs);
  }
  if (!GradMode::is_enabled()) return out;
  // Always record: parameters used inside fn may require grad even when no input does.
  auto vjp = [fn, inputs, rng, amp, &gen](const Tensor& g) -> TensorList {
    TensorList detached;
    for (const Tensor& t : inputs) {
      if (!t.defined()) {
        detached.push_back(t);
        continue;
      }
      Tensor d = t.detach();
      if (t.requires_grad()) d.requires_grad_(true);
      detached.push_back(d);
    }
    const Generator::State now = gen.get_state();
    gen.set_state(rng);  // replay the forward's random numbers (dropout masks)
    Tensor recomputed;
    {
      AutoGradMode enable(true);
      const AutocastReplay autocast_as_in_forward(amp);
      recomputed = fn(detached);
    }
    gen.set_state(now);
    if (recomputed.requires_grad()) backward({recomputed}, {g});
    TensorList grads;
    for (const Tensor& d : detached) grads.push_back(d.defined() ? d.grad() : Tensor());
    return grads;
  };
  using Fn = detail::FunctionNode<decltype(vjp)>;
  Tensor result = out.detach();
  return detail::attach(std::make_shared<Fn>("checkpoint", std::move(vjp), inputs, result), result, inputs);
}

}  // namespace ember::autograd
