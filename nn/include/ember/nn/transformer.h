// Attention layers under PyTorch's names and state_dict keys, so a PyTorch state_dict loads:
// MultiheadAttention, TransformerEncoderLayer, TransformerDecoderLayer, TransformerEncoder.
//
// Invariants:
// - Masks follow torch.nn (the opposite of scaled_dot_product_attention's bool convention):
//   a bool key_padding_mask [N, S] or attn_mask [L, S] / [N * num_heads, L, S] is true where
//   attention is NOT allowed; a floating mask is added to the scores. As PyTorch does, bool
//   masks become additive -inf masks and the two are summed ([N, 1, L, S] when both are given;
//   one alone is passed to the kernel in its own shape and read through broadcast strides).
// - need_weights = true computes the weights explicitly (matmul, softmax, dropout, matmul),
//   as PyTorch does, and returns them after dropout; need_weights = false runs the fused
//   scaled_dot_product_attention on strided head views of the projections. A query row with
//   every key masked gives NaN weights and output on the explicit path (PyTorch's values) and
//   a zero attention output on the fused one (Note [attention masks and dropout]).
// - Dropout (attention and residual) runs only in training mode, from the default generator
//   of the input's device.
// - TransformerEncoder deep-copies its layer num_layers times (layers.0, layers.1, ..., as
//   PyTorch's _get_clones): equal values, separate tensors on the layer's device and dtype.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ember/nn/layers.h"
#include "ember/nn/module.h"

namespace ember::nn {

struct MultiheadAttentionOptions {
  double dropout = 0.0;
  bool bias = true;
  bool add_bias_kv = false;    // only false is supported
  bool add_zero_attn = false;  // only false is supported
  int64_t kdim = 0;            // 0: embed_dim
  int64_t vdim = 0;            // 0: embed_dim
  bool batch_first = false;
};

// torch.nn.MultiheadAttention. Parameters: in_proj_weight [3E, E] (when kdim == vdim == E),
// else q_proj_weight [E, E], k_proj_weight [E, kdim], v_proj_weight [E, vdim]; in_proj_bias
// [3E] and out_proj.bias with bias; out_proj.weight [E, E]. Init as PyTorch: xavier_uniform_
// projections, zero biases, out_proj.weight as a Linear's.
class MultiheadAttention : public Module {
 public:
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, MultiheadAttentionOptions options = {});
  // query [L, N, E] ([N, L, E] with batch_first; [L, E] unbatched), key [S, N, kdim], value
  // [S, N, vdim]. Returns {attn_output like query, attn_weights [N, L, S] averaged over heads
  // or [N, num_heads, L, S] (undefined unless need_weights)}. is_causal is PyTorch's hint that
  // attn_mask is the causal mask; without an attn_mask ember builds the (top-left) causal
  // mask instead of throwing.
  std::pair<Tensor, Tensor> forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& key_padding_mask = Tensor(),
                                    bool need_weights = true, const Tensor& attn_mask = Tensor(),
                                    bool average_attn_weights = true, bool is_causal = false) const;
  std::pair<Tensor, Tensor> operator()(const Tensor& query, const Tensor& key, const Tensor& value,
                                       const Tensor& key_padding_mask = Tensor(),
                                       bool need_weights = true,
                                       const Tensor& attn_mask = Tensor(),
                                       bool average_attn_weights = true,
                                       bool is_causal = false) const {
    return forward(query, key, value, key_padding_mask, need_weights, attn_mask,
                   average_attn_weights, is_causal);
  }
  void reset_parameters();
  std::string type_name() const override { return "MultiheadAttention"; }
  std::string extra_repr() const override;

  int64_t embed_dim, num_heads, head_dim, kdim, vdim;
  MultiheadAttentionOptions options;
  Tensor in_proj_weight, q_proj_weight, k_proj_weight, v_proj_weight, in_proj_bias;
  Linear out_proj;
};

struct TransformerLayerOptions {
  int64_t dim_feedforward = 2048;
  double dropout = 0.1;
  std::string activation = "relu";  // "relu" or "gelu"
  double layer_norm_eps = 1e-5;
  bool batch_first = false;
  bool norm_first = false;
  bool bias = true;
};
using TransformerEncoderLayerOptions = TransformerLayerOptions;
using TransformerDecoderLayerOptions = TransformerLayerOptions;

// torch.nn.TransformerEncoderLayer: self_attn, linear1, linear2, norm1, norm2.
class TransformerEncoderLayer : public Module {
 public:
  TransformerEncoderLayer(int64_t d_model, int64_t nhead, TransformerLayerOptions options = {});
  Tensor forward(const Tensor& src, const Tensor& src_mask = Tensor(),
                 const Tensor& src_key_padding_mask = Tensor(), bool is_causal = false) const;
  Tensor operator()(const Tensor& src, const Tensor& src_mask = Tensor(),
                    const Tensor& src_key_padding_mask = Tensor(), bool is_causal = false) const {
    return call(src, [&](const Tensor& in) { return forward(in, src_mask, src_key_padding_mask, is_causal); });
  }
  // A deep copy: the same options, parameters copied (same device and dtype), same mode.
  std::shared_ptr<TransformerEncoderLayer> clone() const;
  std::string type_name() const override { return "TransformerEncoderLayer"; }

  int64_t d_model, nhead;
  TransformerLayerOptions options;
  MultiheadAttention self_attn;
  Linear linear1, linear2;
  LayerNorm norm1, norm2;
};

// torch.nn.TransformerDecoderLayer: self_attn, multihead_attn (over memory), linear1,
// linear2, norm1, norm2, norm3.
class TransformerDecoderLayer : public Module {
 public:
  TransformerDecoderLayer(int64_t d_model, int64_t nhead, TransformerLayerOptions options = {});
  Tensor forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = Tensor(),
                 const Tensor& memory_mask = Tensor(),
                 const Tensor& tgt_key_padding_mask = Tensor(),
                 const Tensor& memory_key_padding_mask = Tensor(), bool tgt_is_causal = false,
                 bool memory_is_causal = false) const;
  Tensor operator()(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = Tensor(),
                    const Tensor& memory_mask = Tensor(),
                    const Tensor& tgt_key_padding_mask = Tensor(),
                    const Tensor& memory_key_padding_mask = Tensor(), bool tgt_is_causal = false,
                    bool memory_is_causal = false) const {
    return forward(tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask,
                   memory_key_padding_mask, tgt_is_causal, memory_is_causal);
  }
  std::string type_name() const override { return "TransformerDecoderLayer"; }

  int64_t d_model, nhead;
  TransformerLayerOptions options;
  MultiheadAttention self_attn, multihead_attn;
  Linear linear1, linear2;
  LayerNorm norm1, norm2, norm3;
};

namespace detail {
// The "layers" list of TransformerEncoder (PyTorch's ModuleList): children "0", "1", ...
class TransformerLayerList : public Module {
 public:
  void push_back(std::shared_ptr<TransformerEncoderLayer> layer);
  size_t size() const { return layers_.size(); }
  const TransformerEncoderLayer& operator[](size_t i) const { return *layers_[i]; }
  TransformerEncoderLayer& operator[](size_t i) { return *layers_[i]; }
  std::string type_name() const override { return "ModuleList"; }

 private:
  std::vector<std::shared_ptr<TransformerEncoderLayer>> layers_;
};
}  // namespace detail

// torch.nn.TransformerEncoder: num_layers deep copies of encoder_layer, then `norm` if given.
class TransformerEncoder : public Module {
 public:
  TransformerEncoder(const TransformerEncoderLayer& encoder_layer, int64_t num_layers,
                     std::shared_ptr<LayerNorm> norm = nullptr);
  Tensor forward(const Tensor& src, const Tensor& mask = Tensor(),
                 const Tensor& src_key_padding_mask = Tensor(), bool is_causal = false) const;
  Tensor operator()(const Tensor& src, const Tensor& mask = Tensor(),
                    const Tensor& src_key_padding_mask = Tensor(), bool is_causal = false) const {
    return call(src, [&](const Tensor& in) { return forward(in, mask, src_key_padding_mask, is_causal); });
  }
  std::string type_name() const override { return "TransformerEncoder"; }

  int64_t num_layers;
  detail::TransformerLayerList layers;
  std::shared_ptr<LayerNorm> norm;
};

}  // namespace ember::nn
