// Tensor parallelism: layers whose weights are split over the ranks of a group, Megatron-LM's
// layout (PyTorch's ColwiseParallel / RowwiseParallel).
//
//   distributed::DeviceMesh mesh(Device::cpu(), {2, 2}, {"dp", "tp"});
//   distributed::tensor_parallelize(gpt, mesh.group("tp"));     // heads and MLP units split
//   for (auto& b : gpt.blocks) distributed::fully_shard(*b, {.group = mesh.group("dp")});
//   auto fsdp = distributed::fully_shard(gpt, {.group = mesh.group("dp")});
//
// Invariants (a group of P ranks, this one p; every size split must divide by P):
// - The differentiable collectives are Megatron's mappings: copy_to (identity forward,
//   all-reduced gradient), reduce_from (all-reduced forward, identity gradient), gather_from
//   (all-gathered last dimension forward, this rank's slice of the gradient). Every rank of
//   the group computes the same replicated activations, so the parameters that stay whole
//   (layer norms, embeddings, the row-parallel layers' biases) get the same gradient on every
//   rank with no communication.
// - ColumnParallelLinear(in, out): weight rows [p out/P, (p+1) out/P) and their bias; the
//   input is replicated, the output split on its last dimension (or gathered: gather_output).
//   RowParallelLinear(in, out): weight columns [p in/P, ...); the input split on its last
//   dimension, the output the all-reduced sum plus the whole bias.
//   VocabParallelEmbedding(V, D): rows [p V/P, ...); ids of other ranks' rows look up zeros
//   here and the sum over the group is the embedding.
//   vocab_parallel_cross_entropy(logits [N, V/P], target [N]): cross_entropy over the whole
//   vocabulary without any rank holding the whole logits: the max, the sum of exponentials
//   and the target's logit are reduced over the group ([N] each).
// - from(full layer): the slice of an unsharded layer's weights that this rank holds (on its
//   device, in its dtype), so a parallel model equals its unsharded twin (tests, porting a
//   checkpoint).
// - Errors name the layer and the sizes that do not divide.
#pragma once

#include <cstdint>
#include <memory>

#include "ember/distributed/process_group.h"
#include "ember/nn/gpt.h"
#include "ember/nn/layers.h"
#include "ember/nn/llama.h"
#include "ember/nn/module.h"

namespace ember::distributed {

// ---- Megatron's mappings (each an autograd op) ----
Tensor copy_to_tensor_parallel(const Tensor& x, const std::shared_ptr<ProcessGroup>& group);
Tensor reduce_from_tensor_parallel(const Tensor& x, const std::shared_ptr<ProcessGroup>& group);
Tensor gather_from_tensor_parallel(const Tensor& x, const std::shared_ptr<ProcessGroup>& group);

struct ColumnParallelOptions {
  bool bias = true;
  bool gather_output = false;  // all-gather the [..., out/P] output into [..., out]
};

class ColumnParallelLinear : public nn::Module {
 public:
  ColumnParallelLinear(int64_t in_features, int64_t out_features, std::shared_ptr<ProcessGroup> group,
                       ColumnParallelOptions options = {});
  // This rank's slice of `full` (weight [out, in], bias [out]).
  static std::shared_ptr<ColumnParallelLinear> from(const nn::Linear& full, std::shared_ptr<ProcessGroup> group,
                                                    ColumnParallelOptions options = {});
  Tensor forward(const Tensor& x) const override;
  std::string type_name() const override { return "ColumnParallelLinear"; }
  std::string extra_repr() const override;

  int64_t in_features, out_features;  // the whole layer's
  ColumnParallelOptions options;
  std::shared_ptr<ProcessGroup> group;
  Tensor weight, bias;  // [out/P, in], [out/P]
};

struct RowParallelOptions {
  bool bias = true;
  bool input_is_parallel = true;  // false: the input is whole, this rank takes its slice
};

class RowParallelLinear : public nn::Module {
 public:
  RowParallelLinear(int64_t in_features, int64_t out_features, std::shared_ptr<ProcessGroup> group,
                    RowParallelOptions options = {});
  static std::shared_ptr<RowParallelLinear> from(const nn::Linear& full, std::shared_ptr<ProcessGroup> group,
                                                 RowParallelOptions options = {});
  Tensor forward(const Tensor& x) const override;
  std::string type_name() const override { return "RowParallelLinear"; }
  std::string extra_repr() const override;

  int64_t in_features, out_features;
  RowParallelOptions options;
  std::shared_ptr<ProcessGroup> group;
  Tensor weight, bias;  // [out, in/P], [out] (whole)
};

class VocabParallelEmbedding : public nn::Module {
 public:
  VocabParallelEmbedding(int64_t num_embeddings, int64_t embedding_dim, std::shared_ptr<ProcessGroup> group);
  static std::shared_ptr<VocabParallelEmbedding> from(const nn::Embedding& full, std::shared_ptr<ProcessGroup> group);
  Tensor forward(const Tensor& ids) const override;
  std::string type_name() const override { return "VocabParallelEmbedding"; }
  std::string extra_repr() const override;

  int64_t num_embeddings, embedding_dim;  // the whole table's
  int64_t vocab_start = 0;                // this rank's first row
  std::shared_ptr<ProcessGroup> group;
  Tensor weight;  // [V/P, D]
};

// logits [N, V/P] (this rank's columns [p V/P, ...) of the whole [N, V]), target [N] (i64,
// whole ids; ignore_index rows count for nothing): the mean cross-entropy over the kept rows,
// the same on every rank of the group. num_classes >= 0: only the first num_classes columns
// of the whole vocabulary are classes (a padded vocabulary's extra columns take no probability
// and get no gradient). A target outside [0, classes) is a ValueError on the CPU (on a GPU
// checking would stop the host every step: it is not checked there).
Tensor vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& target,
                                    const std::shared_ptr<ProcessGroup>& group, int64_t ignore_index = -100,
                                    int64_t num_classes = -1);

// Splits `model` over `group`, Megatron's layout: each attention's heads (c_attn's q, k and v
// rows of this rank's heads, c_proj's matching columns) and each MLP's hidden units (c_fc's
// rows, c_proj's columns), with hooks on attn and mlp that put the collectives in (copy_to on
// the input, reduce_from on the output before c_proj's whole bias); and the vocabulary: wte's
// rows (the tied embedding and classifier), looked up masked to this rank's rows and summed,
// the classifier (GPT::head) giving this rank's logit columns to the vocab-parallel
// cross-entropy, so no rank forms the whole [N, V] logits (the logits-only forward gathers
// them). wpe and the layer norms stay whole. Requires n_head, 4 n_embd and padded_vocab_size
// divisible by the group size and dropout 0 (a dropout mask on partial sums would differ from
// one on their total); call it before fully_shard and after moving the model to its device.
void tensor_parallelize(nn::GPT& model, const std::shared_ptr<ProcessGroup>& group);
// Llama likewise: q_proj and o_proj by heads, k_proj and v_proj by key-value heads, gate_proj
// and up_proj by rows, down_proj by columns (no biases). Requires n_head, n_kv_head and
// intermediate_size divisible by the group size.
void tensor_parallelize(nn::Llama& model, const std::shared_ptr<ProcessGroup>& group);

class FSDPModule;
// optim::clip_grad_norm_ (2-norm) of a GPT or Llama that tensor_parallelize split over `group`: the
// squared gradients of the split parameters are summed over the group, those of the whole ones
// counted once; under fully_shard (`fsdp` given) the gradients are its pieces', summed over its
// group too. Returns the total norm (0-dim f32), the same on every rank. Collective.
Tensor clip_grad_norm_tensor_parallel(const nn::CausalLM& model, const std::shared_ptr<ProcessGroup>& group,
                                      double max_norm, const FSDPModule* fsdp = nullptr);

}  // namespace ember::distributed
