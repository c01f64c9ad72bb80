// build/bin/ember-info as a user runs it: exit status and wording without a GPU, the
// --estimate numbers, and bad flags naming themselves.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

#include "support/test_support.h"

#ifndef EMBER_BIN_DIR
#error "EMBER_BIN_DIR must name the folder holding ember-info"
#endif

namespace {
using InfoRun = ember::test::ProcessResult;

InfoRun run_info(const std::string& args) {
  return ember::test::run_command(std::string(EMBER_BIN_DIR) + "/ember-info " + args);
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}
}  // namespace

TEST(EmberInfo, ReportsBuildAndDevices) {
  const InfoRun r = run_info("");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "ember ")) << r.output;
  EXPECT_TRUE(contains(r.output, "build:")) << r.output;
  EXPECT_TRUE(contains(r.output, "versions:")) << r.output;
  if (ember::cuda::is_available()) {
    EXPECT_TRUE(contains(r.output, "cuda:0")) << r.output;
    EXPECT_TRUE(contains(r.output, "compute capability")) << r.output;
    EXPECT_FALSE(contains(r.output, "no CUDA device")) << r.output;
  } else {
    EXPECT_TRUE(contains(r.output, "no CUDA device")) << r.output;
    EXPECT_FALSE(contains(r.output, "cuda:0")) << r.output;
  }
}

TEST(EmberInfo, EstimateBf16AdamW) {
  const InfoRun r = run_info("--estimate 124M --dtype bf16 --optimizer adamw");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "124M parameters, bf16, adamw")) << r.output;
  for (const char* line : {"weights              248.0 MB", "gradients            248.0 MB",
                           "master weights       496.0 MB", "optimizer state      992.0 MB",
                           "activations          496.0 MB", "workspace            512.0 MB",
                           "total                2.992 GB"})
    EXPECT_TRUE(contains(r.output, line)) << line << "\n" << r.output;
  if (ember::cuda::is_available())
    EXPECT_TRUE(contains(r.output, "cuda:0 (")) << r.output;  // a fit verdict per device
  else
    EXPECT_TRUE(contains(r.output, "no CUDA device to compare with")) << r.output;
}

TEST(EmberInfo, EstimateWithShape) {
  const InfoRun r = run_info("--estimate 1.5e8 --dtype f32 --optimizer sgd --batch-tokens 8192 "
                         "--layers 12 --hidden 768");
  ASSERT_EQ(r.status, 0) << r.output;
  // 12 * 8192 * 768 * (16 * 4 + 2) = 4.983 GB of activations; weights 600 MB; no state.
  EXPECT_TRUE(contains(r.output, "4.983 GB")) << r.output;
  EXPECT_TRUE(contains(r.output, "weights              600.0 MB")) << r.output;
  EXPECT_TRUE(contains(r.output, "optimizer state           0 B")) << r.output;
}

TEST(EmberInfo, BadFlagsExitNonZeroNamingTheFlag) {
  struct Case {
    const char* args;
    const char* flag;
  };
  for (const Case& c : {Case{"--estimate banana", "--estimate"},
                        Case{"--estimate 124M --dtype f64", "--dtype"},
                        Case{"--estimate 124M --optimizer lion", "--optimizer"},
                        Case{"--estimate 124M --layers -3", "--layers"},
                        Case{"--dtype bf16", "--estimate"},
                        Case{"--no-such-flag", "--no-such-flag"}}) {
    const InfoRun r = run_info(c.args);
    EXPECT_NE(r.status, 0) << c.args << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, c.flag)) << c.args << "\n" << r.output;
  }
}
