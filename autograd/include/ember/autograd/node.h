// The backward graph. Every differentiable op produces exactly one differentiable output, so
// a Node receives one gradient (the sum of all uses of its output) and returns one gradient
// per input. Ops with auxiliary outputs (max's indices, layer_norm's statistics) save them as
// non-differentiable state. Edges point from a node to the nodes of its inputs: the input's
// grad_fn, or the AccumulateGrad node of a leaf, or null when that input needs no gradient.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "ember/tensor.h"

namespace ember::autograd {

struct ForwardSite;  // ember/autograd/anomaly.h

class Node : public std::enable_shared_from_this<Node> {
 public:
  Node();
  virtual ~Node();  // hands next_edges to detail::release_node (Note [Iterative graph release])
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // Gradients with respect to each input (one per entry of next_edges; undefined = none).
  virtual TensorList apply(Tensor grad) = 0;
  virtual const char* name() const = 0;
  // Frees saved tensors once backward has used them (unless retain_graph).
  virtual void release() {}

  std::vector<std::shared_ptr<Node>> next_edges;
  // Hooks on the gradient of this node's output (Tensor::register_hook on a non-leaf).
  std::vector<std::function<Tensor(const Tensor&)>> pre_hooks;
  // Later nodes run first in backward: a topological order that also frees memory early.
  uint64_t sequence_nr() const { return sequence_nr_; }
  // Where the forward of this node was called; recorded only under autograd::detect_anomaly.
  std::unique_ptr<ForwardSite> forward_site;

 private:
  uint64_t sequence_nr_;
};

// Sink of a leaf's gradient: runs the leaf's hooks, accumulates into .grad(), then runs
// post-accumulate hooks (the signal DDP uses to start a bucket's all-reduce).
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(Tensor leaf) : leaf_(std::move(leaf)) {}
  TensorList apply(Tensor grad) override;
  const char* name() const override { return "AccumulateGrad"; }
  const Tensor& leaf() const { return leaf_; }

 private:
  Tensor leaf_;
};

// The node a gradient for `t` flows into: t's grad_fn, or its leaf accumulator (created on
// first use), or null when t does not require grad.
std::shared_ptr<Node> gradient_edge(const Tensor& t);

}  // namespace ember::autograd
