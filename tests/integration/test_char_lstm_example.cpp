// build/bin/char_lstm end to end on the Brown corpus (data/brown, from
// bash scripts/fetch_data.sh brown; the test skips without it): a CI-sized run trains (the
// training loss falls from its first report to its last, and the validation loss with it),
// prints tokens/s and a sample, and bad flags fail with a message naming them.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "ember/ember.h"
#include "support/onnx_runtime.h"
#include "support/test_support.h"

#ifndef EMBER_BIN_DIR
#error "EMBER_BIN_DIR must name the folder holding char_lstm"
#endif
#ifndef EMBER_TEST_DATA_DIR
#error "EMBER_TEST_DATA_DIR must name tests/fixtures"
#endif

#if defined(__SANITIZE_ADDRESS__)
#define EMBER_TEST_UNDER_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMBER_TEST_UNDER_SANITIZER 1
#endif
#endif

namespace fs = std::filesystem;

namespace {

using ember::test::ProcessResult;

ProcessResult run_char_lstm(const std::string& args) {
  return ember::test::run_command(std::string(EMBER_BIN_DIR) + "/char_lstm " + args);
}

fs::path brown_dir() { return fs::path(EMBER_TEST_DATA_DIR) / ".." / ".." / "data" / "brown"; }

TEST(CharLstmExample, TrainingLossFallsOnBrown) {
  if (!fs::exists(brown_dir() / "ca01"))
    GTEST_SKIP() << "no Brown corpus at " << brown_dir() << " (bash scripts/fetch_data.sh brown)";
#ifdef EMBER_TEST_UNDER_SANITIZER
  const std::string steps = "--steps 8 --eval-every 4";
#else
  const std::string steps = "--steps 60 --eval-every 20";
#endif
  const fs::path onnx = fs::temp_directory_path() / ("ember_char_lstm_" + std::to_string(getpid()) + ".onnx");
  const ProcessResult r = run_char_lstm("--data " + brown_dir().string() + " " + steps +
                                        " --hidden 64 --layers 1 --batch 16 --seq-len 32 --eval-batches 2"
                                        " --lr 1e-2 --sample 40 --seed 3 --export-onnx " + onnx.string());
  ASSERT_EQ(r.status, 0) << r.output;
  const std::regex line(R"(step +(\d+) \| train loss ([0-9.]+) \| val loss ([0-9.]+) \| (\d+) tok/s)");
  std::vector<double> train, val;
  for (auto it = std::sregex_iterator(r.output.begin(), r.output.end(), line); it != std::sregex_iterator(); ++it) {
    train.push_back(std::stod((*it)[2]));
    val.push_back(std::stod((*it)[3]));
    EXPECT_GT(std::stod((*it)[4]), 0);
  }
  ASSERT_GE(train.size(), 2u) << r.output;
  // Bytes start at log(256) = 5.55; a model that learns the character frequencies alone is
  // below 3.5 within a few dozen steps.
  EXPECT_LT(train.back(), train.front() - 0.3) << r.output;
  EXPECT_LT(val.back(), val.front()) << r.output;
#ifndef EMBER_TEST_UNDER_SANITIZER
  EXPECT_LT(train.back(), 3.5) << r.output;
#endif
  EXPECT_NE(r.output.find("sample:\nThe "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("result: {\"example\": \"char_lstm\""), std::string::npos) << r.output;

  // --export-onnx: in ONNX Runtime the state carries over between calls (4 bytes, then 6 more
  // from the returned state = 10 at once), and the model predicts English bytes.
  using namespace ember;
  if (!io::onnx_export_available()) GTEST_SKIP() << "this build has no ONNX export";
  if (std::string why = test::onnxruntime_missing(); !why.empty()) GTEST_SKIP() << why;
  const std::string text = "The jury said it did find that the city ";
  std::vector<int64_t> bytes;
  for (int b = 0; b < 2; ++b)
    for (int64_t i = 0; i < 10; ++i) bytes.push_back(uint8_t(text[size_t(b * 10 + i)]));
  const Tensor x = tensor<int64_t>(bytes, {2, 10}), zero = zeros({1, 2, 64});
  const test::OnnxRun whole = test::run_onnxruntime(onnx.string(), {{"bytes", x}, {"h", zero}, {"c", zero}});
  const test::OnnxRun first = test::run_onnxruntime(onnx.string(), {{"bytes", x.slice(1, 0, 4).contiguous()}, {"h", zero}, {"c", zero}});
  const test::OnnxRun rest = test::run_onnxruntime(
      onnx.string(), {{"bytes", x.slice(1, 4, 10).contiguous()}, {"h", first.outputs.at(1)}, {"c", first.outputs.at(2)}});
  ASSERT_EQ(whole.outputs.at(0).sizes(), Shape({2, 10, 256}));
  EXPECT_TRUE(test::all_close(cat({first.outputs[0], rest.outputs.at(0)}, 1), whole.outputs[0], 1e-5, 1e-5));
  EXPECT_TRUE(test::all_close(rest.outputs[1], whole.outputs[1], 1e-5, 1e-5));
  EXPECT_TRUE(test::all_close(rest.outputs[2], whole.outputs[2], 1e-5, 1e-5));
  const Tensor loss = cross_entropy(whole.outputs[0].slice(1, 0, 9).reshape({18, 256}), x.slice(1, 1, 10).reshape({18}));
  EXPECT_LT(loss.item<double>(), 5.0);  // uniform over bytes: ln 256 = 5.55
  fs::remove(onnx);
}

TEST(CharLstmExample, BadFlagsAndMissingDataFailWithAMessage) {
  ProcessResult r = run_char_lstm("--hidden 0");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--hidden"), std::string::npos) << r.output;
  r = run_char_lstm("--data /nonexistent/brown --steps 1");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("fetch_data.sh brown"), std::string::npos) << r.output;
}

}  // namespace
