// How much device memory a training run needs: the pure arithmetic behind
// `ember-info --estimate`. No CUDA, no ember types: tests/tools checks it number by number.
//
// The model (bytes are decimal: 1 MB = 10^6 B, 1 GB = 10^9 B):
// - weights: params x bytes(dtype)                       (f32 4, bf16/f16 2)
// - gradients: params x bytes(dtype)                     (gradients have the weights' dtype)
// - master weights: params x 4, only for bf16/f16 params with master_weights on (the f32
//   copy mixed-precision training updates and casts back from)
// - optimizer state, always f32: adam/adamw two moments (8 B/param), sgd-momentum one
//   buffer (4 B/param), sgd none
// - activations, kept for backward. With batch_tokens (T), layers (L) and hidden (H) known:
//   the per-layer count of Korthikanti et al. 2022 ("Reducing Activation Recomputation in
//   Large Transformer Models", eq. 2) for a GPT-style block with 4H MLP and no recomputation:
//       L x T x H x (16 x a + 2)  bytes,  a = bytes(dtype) of an activation
//   (34 T H per layer at a = 2: sixteen T x H tensors plus two 1-byte dropout masks). With
//   seq_len (S) and heads (A) also known, the attention scores of unfused attention add
//       L x T x A x S x (2 x a + 1)  bytes  (scores, softmax output, dropout mask)
//   and with vocab (V) the f32 logits and their gradient add T x V x 8 bytes.
//   Without T, L and H the activations are assumed to be kUnknownActivationFraction of the
//   model and optimizer state above: a rough placeholder, stated as such in the output.
// - workspace: kWorkspaceBytes for the CUDA context, cuBLASLt/cuDNN workspaces and allocator
//   rounding.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace ember::tools {

enum class ParamDType { f32, bf16, f16 };
enum class OptimizerKind { adamw, adam, sgd, sgd_momentum };

inline constexpr double kUnknownActivationFraction = 0.25;
inline constexpr double kWorkspaceBytes = 512e6;

struct EstimateInput {
  double params = 0;  // parameter count
  ParamDType dtype = ParamDType::f32;
  OptimizerKind optimizer = OptimizerKind::adamw;
  bool master_weights = true;  // f32 master copy for bf16/f16 params
  // Activation shape, 0 = unknown.
  int64_t batch_tokens = 0;  // tokens per step (batch size x sequence length)
  int64_t layers = 0;
  int64_t hidden = 0;
  int64_t seq_len = 0;
  int64_t heads = 0;
  int64_t vocab = 0;
};

struct MemoryEstimate {
  double weights = 0;
  double gradients = 0;
  double master_weights = 0;
  double optimizer_state = 0;
  double activations = 0;
  bool activations_from_formula = false;  // false: the kUnknownActivationFraction guess
  double workspace = 0;
  double total() const {
    return weights + gradients + master_weights + optimizer_state + activations + workspace;
  }
};

MemoryEstimate estimate_memory(const EstimateInput& in);

// "124M", "1.5B", "7e9", "350k", "2T", "124000000" -> count. Suffixes k/K, M, B/G, T (case-
// insensitive except that they must follow a number). nullopt for anything else, and for
// counts that are not positive and finite.
std::optional<double> parse_count(const std::string& text);
std::optional<ParamDType> parse_param_dtype(const std::string& text);  // f32 bf16 f16
std::optional<OptimizerKind> parse_optimizer(const std::string& text);  // adamw adam sgd sgd-momentum
const char* to_string(ParamDType dtype);
const char* to_string(OptimizerKind optimizer);
double bytes_per_element(ParamDType dtype);

// 496000000 -> "496.0 MB", 1.2e10 -> "12.00 GB" (decimal units, at least 3 significant digits).
std::string format_bytes(double bytes);
// 124e6 -> "124M", 1.5e9 -> "1.5B".
std::string format_count(double count);

}  // namespace ember::tools
