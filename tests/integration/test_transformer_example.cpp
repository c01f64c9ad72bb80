// build/bin/transformer_encoder end to end in a CI-sized run (a few seconds): it trains a small
// Transformer encoder on padded variable-length digit sequences and must classify held-out
// ones far above chance (50%), and its padding mask must matter (the padding holds random
// digits: the same model run without the mask does clearly worse). Bad flags exit non-zero
// with a message.
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>

#include "ember/ember.h"
#include "support/onnx_runtime.h"
#include "support/test_support.h"

#ifndef EMBER_BIN_DIR
#error "EMBER_BIN_DIR must name the folder holding transformer_encoder"
#endif

namespace {

using ember::test::ProcessResult;

ProcessResult run_example(const std::string& args) {
  return ember::test::run_command(std::string(EMBER_BIN_DIR) + "/transformer_encoder " + args);
}

// The number after `"key": ` in the result line, or -1.
double result_field(const std::string& out, const std::string& key) {
  const size_t line = out.find("result: {");
  if (line == std::string::npos) return -1;
  const size_t at = out.find("\"" + key + "\": ", line);
  return at == std::string::npos ? -1 : std::stod(out.substr(at + key.size() + 4));
}

TEST(TransformerExample, LearnsTheTaskAndThePaddingMaskMatters) {
  const ProcessResult r = run_example(
      "--steps 120 --batch-size 32 --max-len 12 --d-model 32 --heads 4 --layers 1 --ff 64 "
      "--lr 3e-3 --eval-size 512 --log-every 40 --seed 1");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("step 120/120  train loss"), std::string::npos) << r.output;
  const double acc = result_field(r.output, "test_accuracy");
  const double unmasked = result_field(r.output, "test_accuracy_without_mask");
  EXPECT_GT(acc, 0.9) << r.output;                 // chance: 0.5
  EXPECT_LT(unmasked, acc - 0.05) << r.output;     // the mask is what makes it work
  EXPECT_GT(result_field(r.output, "tokens_per_s"), 0) << r.output;
  EXPECT_LT(result_field(r.output, "train_loss"), 0.3) << r.output;  // ln 2 = 0.69 at chance
}

// --export-onnx: the trained classifier in ONNX Runtime, on sequences made here by the task's
// rule at two lengths (one the export's, one longer): above chance by far, and blind to what the
// padded positions hold (the padding mask is in the graph).
TEST(TransformerExample, ExportedModelMasksPaddingInOnnxRuntime) {
  using namespace ember;
  if (!io::onnx_export_available()) GTEST_SKIP() << "this build has no ONNX export";
  if (std::string why = test::onnxruntime_missing(); !why.empty()) GTEST_SKIP() << why;
  const std::filesystem::path onnx =
      std::filesystem::temp_directory_path() / ("ember_encoder_" + std::to_string(getpid()) + ".onnx");
  const ProcessResult r = run_example(
      "--steps 120 --batch-size 32 --max-len 12 --d-model 32 --heads 4 --layers 1 --ff 64 "
      "--lr 3e-3 --eval-size 64 --log-every 40 --seed 1 --export-onnx " + onnx.string());
  ASSERT_EQ(r.status, 0) << r.output;
  std::mt19937_64 rng(7);
  for (int64_t T : {11, 12, 5}) {
    SCOPED_TRACE(T);
    const int64_t N = 200;
    std::vector<int64_t> tokens(static_cast<size_t>(N * T)), other(static_cast<size_t>(N * T)), labels(static_cast<size_t>(N));
    std::vector<double> pad(static_cast<size_t>(N * T));
    for (int64_t b = 0; b < N; ++b) {
      const int64_t len = 2 * int64_t(rng() % uint64_t((T + 1) / 2)) + 1;  // odd, 1 .. T
      int64_t high = 0;
      for (int64_t t = 0; t < T; ++t) {
        const size_t i = size_t(b * T + t);
        tokens[i] = int64_t(rng() % 10);
        other[i] = t < len ? tokens[i] : 9 - tokens[i];  // the same sequence, other padding
        pad[i] = t >= len;
        if (t < len) high += tokens[i] >= 5;
      }
      labels[size_t(b)] = 2 * high > len;
    }
    const Tensor padding = tensor<double>(pad, {N, T}).gt(0.5);
    const test::OnnxRun a = test::run_onnxruntime(onnx.string(), {{"tokens", tensor<int64_t>(tokens, {N, T})}, {"padding", padding}});
    const test::OnnxRun b = test::run_onnxruntime(onnx.string(), {{"tokens", tensor<int64_t>(other, {N, T})}, {"padding", padding}});
    ASSERT_EQ(a.outputs.at(0).sizes(), Shape({N, 2}));
    EXPECT_TRUE(test::all_close(a.outputs[0], b.outputs[0], 1e-5, 1e-5));
    const double acc = a.outputs[0].argmax(1).eq(tensor<int64_t>(labels, {N})).to(DType::f64).mean().item<double>();
    EXPECT_GT(acc, 0.85);
  }
  std::filesystem::remove(onnx);
}

TEST(TransformerExample, BadFlagsExitWithAMessage) {
  const ProcessResult r = run_example("--d-model 30 --heads 4 --steps 1");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--heads 4 must divide --d-model 30"), std::string::npos) << r.output;
}

}  // namespace
