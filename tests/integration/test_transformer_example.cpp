// build/bin/transformer_encoder end to end in a CI-sized run (a few seconds): it trains a small
// Transformer encoder on padded variable-length digit sequences and must classify held-out
// ones far above chance (50%), and its padding mask must matter (the padding holds random
// digits: the same model run without the mask does clearly worse). Bad flags exit non-zero
// with a message.
#include <cstdio>
#include <string>

#include "support/test_support.h"

#ifndef EMBER_BIN_DIR
#error "EMBER_BIN_DIR must name the folder holding transformer_encoder"
#endif

namespace {

struct ProcessResult {
  int status;
  std::string output;
};

ProcessResult run_example(const std::string& args) {
  const std::string cmd = std::string(EMBER_BIN_DIR) + "/transformer_encoder " + args + " 2>&1";
  ProcessResult r{-1, ""};
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  while (size_t got = fread(buf, 1, sizeof buf, p)) r.output.append(buf, got);
  const int raw = pclose(p);
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
  return r;
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

TEST(TransformerExample, BadFlagsExitWithAMessage) {
  const ProcessResult r = run_example("--d-model 30 --heads 4 --steps 1");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--heads 4 must divide --d-model 30"), std::string::npos) << r.output;
}

}  // namespace
