// tools/memory_estimate: the arithmetic behind `ember-info --estimate`, number by number
// (decimal units: 124M f32 params are 496 MB).
#include <gtest/gtest.h>

#include <cmath>

#include "memory_estimate.h"

using namespace ember::tools;

namespace {
EstimateInput input(double params, ParamDType dtype, OptimizerKind opt) {
  EstimateInput in;
  in.params = params;
  in.dtype = dtype;
  in.optimizer = opt;
  return in;
}
}  // namespace

TEST(MemoryEstimate, F32AdamW) {
  const MemoryEstimate m = estimate_memory(input(124e6, ParamDType::f32, OptimizerKind::adamw));
  EXPECT_DOUBLE_EQ(m.weights, 496e6);
  EXPECT_DOUBLE_EQ(m.gradients, 496e6);
  EXPECT_DOUBLE_EQ(m.master_weights, 0);  // f32 params are their own master copy
  EXPECT_DOUBLE_EQ(m.optimizer_state, 992e6);
  EXPECT_FALSE(m.activations_from_formula);
  EXPECT_DOUBLE_EQ(m.activations, kUnknownActivationFraction * (496e6 + 496e6 + 992e6));
  EXPECT_DOUBLE_EQ(m.workspace, kWorkspaceBytes);
  EXPECT_DOUBLE_EQ(m.total(), 1984e6 + 496e6 + 512e6);
}

TEST(MemoryEstimate, Bf16AndF16AddF32MasterWeights) {
  for (ParamDType dt : {ParamDType::bf16, ParamDType::f16}) {
    EstimateInput in = input(124e6, dt, OptimizerKind::adamw);
    MemoryEstimate m = estimate_memory(in);
    EXPECT_DOUBLE_EQ(m.weights, 248e6);
    EXPECT_DOUBLE_EQ(m.gradients, 248e6);
    EXPECT_DOUBLE_EQ(m.master_weights, 496e6);
    EXPECT_DOUBLE_EQ(m.optimizer_state, 992e6);  // moments stay f32
    EXPECT_DOUBLE_EQ(m.activations, 0.25 * 1984e6);
    EXPECT_DOUBLE_EQ(m.total(), 2992e6);
    in.master_weights = false;
    m = estimate_memory(in);
    EXPECT_DOUBLE_EQ(m.master_weights, 0);
    EXPECT_DOUBLE_EQ(m.total(), 1488e6 + 0.25 * 1488e6 + 512e6);
  }
}

TEST(MemoryEstimate, OptimizerState) {
  EXPECT_DOUBLE_EQ(estimate_memory(input(1e9, ParamDType::f32, OptimizerKind::adam)).optimizer_state,
                   8e9);
  EXPECT_DOUBLE_EQ(
      estimate_memory(input(1e9, ParamDType::f32, OptimizerKind::sgd_momentum)).optimizer_state,
      4e9);
  EXPECT_DOUBLE_EQ(
      estimate_memory(input(1e9, ParamDType::bf16, OptimizerKind::sgd_momentum)).optimizer_state,
      4e9);
  EXPECT_DOUBLE_EQ(estimate_memory(input(1e9, ParamDType::f32, OptimizerKind::sgd)).optimizer_state,
                   0);
}

TEST(MemoryEstimate, ActivationFormula) {
  // GPT-2 small: 12 layers, hidden 768, 8 x 1024 tokens per step, bf16 activations:
  // 12 * 8192 * 768 * 34 bytes.
  EstimateInput in = input(124e6, ParamDType::bf16, OptimizerKind::adamw);
  in.batch_tokens = 8192;
  in.layers = 12;
  in.hidden = 768;
  MemoryEstimate m = estimate_memory(in);
  EXPECT_TRUE(m.activations_from_formula);
  EXPECT_DOUBLE_EQ(m.activations, 12.0 * 8192 * 768 * 34);
  // Unfused attention scores: + L * T * heads * seq * (2a + 1) = 5 bytes at a = 2
  // (Korthikanti et al.'s 5as/h term).
  in.seq_len = 1024;
  in.heads = 12;
  m = estimate_memory(in);
  EXPECT_DOUBLE_EQ(m.activations, 12.0 * 8192 * 768 * 34 + 12.0 * 8192 * 12 * 1024 * 5);
  // f32 logits and their gradient.
  in.vocab = 50257;
  const double with_logits = estimate_memory(in).activations;
  EXPECT_DOUBLE_EQ(with_logits, m.activations + 8192.0 * 50257 * 8);
  // f32 activations: 16 tensors of 4 bytes + 2 one-byte masks per token and hidden unit.
  EstimateInput f = input(124e6, ParamDType::f32, OptimizerKind::adamw);
  f.batch_tokens = 8192;
  f.layers = 12;
  f.hidden = 768;
  EXPECT_DOUBLE_EQ(estimate_memory(f).activations, 12.0 * 8192 * 768 * 66);
  // Partial shapes fall back to the stated guess.
  f.hidden = 0;
  EXPECT_FALSE(estimate_memory(f).activations_from_formula);
}

TEST(MemoryEstimate, ParseCount) {
  EXPECT_EQ(parse_count("124M"), 124e6);
  EXPECT_EQ(parse_count("124m"), 124e6);
  EXPECT_EQ(parse_count("1.5B"), 1.5e9);
  EXPECT_EQ(parse_count("1.5G"), 1.5e9);
  EXPECT_EQ(parse_count("7e9"), 7e9);
  EXPECT_EQ(parse_count("350k"), 350e3);
  EXPECT_EQ(parse_count("2T"), 2e12);
  EXPECT_EQ(parse_count("124000000"), 124e6);
  EXPECT_EQ(parse_count(".5B"), 0.5e9);
  for (const char* bad : {"", "banana", "M", "12MB", "1.5 B", " 12", "-5", "0", "0M", "inf", "nan",
                          "1e999", "12x", "+3"})
    EXPECT_FALSE(parse_count(bad).has_value()) << bad;
}

TEST(MemoryEstimate, ParseNamesAndFormat) {
  EXPECT_EQ(parse_param_dtype("bf16"), ParamDType::bf16);
  EXPECT_EQ(parse_param_dtype("f16"), ParamDType::f16);
  EXPECT_EQ(parse_param_dtype("f32"), ParamDType::f32);
  EXPECT_FALSE(parse_param_dtype("f64").has_value());
  EXPECT_EQ(parse_optimizer("sgd-momentum"), OptimizerKind::sgd_momentum);
  EXPECT_EQ(parse_optimizer("adamw"), OptimizerKind::adamw);
  EXPECT_FALSE(parse_optimizer("lion").has_value());
  EXPECT_STREQ(to_string(OptimizerKind::sgd_momentum), "sgd-momentum");
  EXPECT_STREQ(to_string(ParamDType::bf16), "bf16");
  EXPECT_EQ(format_bytes(496e6), "496.0 MB");
  EXPECT_EQ(format_bytes(2992e6), "2.992 GB");
  EXPECT_EQ(format_bytes(12e9), "12.00 GB");
  EXPECT_EQ(format_bytes(1.5e12), "1.500 TB");
  EXPECT_EQ(format_bytes(48e3), "48.00 kB");
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_count(124e6), "124M");
  EXPECT_EQ(format_count(1.5e9), "1.5B");
  EXPECT_EQ(format_count(7e9), "7B");
}
