// build/bin/vae end to end on a small synthetic MNIST (IDX files written here): its loss goes
// down over the epochs, it writes samples.png and reconstruction.png as valid PNGs of the
// grid's size (read back by support/png_read.h), stops at --max-steps, and refuses bad input
// with a clear message before training.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "ember/io/image.h"
#include "support/png_read.h"
#include "support/test_support.h"

namespace fs = std::filesystem;
using namespace ember;

namespace {

// Faint noise with a bright 6x6 square at a label-dependent place: a structure to learn.
void write_split(const fs::path& dir, const std::string& prefix, int n, uint32_t seed) {
  ember::test::write_mnist_split(dir, prefix, n, seed, ember::test::square_per_class(32, 6, 3));
}

using ember::test::ProcessResult;

ProcessResult run_vae(const std::string& args) {
  return ember::test::run_command(std::string(EMBER_BIN_DIR) + "/vae " + args);
}

// The train losses of the "epoch N: train loss X | ..." lines, in order.
std::vector<double> epoch_losses(const std::string& output) {
  std::vector<double> losses;
  const std::regex line(R"(epoch \d+: train loss ([0-9.]+) \| test loss ([0-9.]+))");
  for (std::sregex_iterator it(output.begin(), output.end(), line), end; it != end; ++it)
    losses.push_back(std::stod((*it)[1].str()));
  return losses;
}

class VaeExample : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("ember_vae_example_" + std::to_string(getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_ / "data");
    write_split(root_ / "data", "train", 640, 1);
    write_split(root_ / "data", "t10k", 100, 2);
  }
  void TearDown() override { fs::remove_all(root_); }
  std::string common() const { return "--data " + (root_ / "data").string() + " --batch-size 64 --log-every 5 "; }
  fs::path root_;
};

TEST_F(VaeExample, LossGoesDownAndSamplesAreWrittenAsPngGrids) {
  const fs::path out = root_ / "out";
  ProcessResult r = run_vae(common() + "--epochs 3 --latent 8 --out " + out.string());
  ASSERT_EQ(r.status, 0) << r.output;
  const std::vector<double> losses = epoch_losses(r.output);
  ASSERT_EQ(losses.size(), 3u) << r.output;
  EXPECT_LT(losses[2], losses[0]) << r.output;
  EXPECT_LT(losses[2], 0.9 * losses[0]) << r.output;  // more than noise: the squares are learned
  EXPECT_EQ(test::result_number(r.output, "steps"), 30) << r.output;
  if (!io::png_output_available()) GTEST_SKIP() << "this build has no PNG output: the loss was checked, not the images";
  EXPECT_NE(r.output.find("wrote " + (out / "samples.png").string()), std::string::npos) << r.output;
  // 64 samples: an 8x8 grid of 28x28 images with padding 2, RGB.
  const test::Png samples = test::read_png((out / "samples.png").string());
  ASSERT_EQ(samples.error, "");
  EXPECT_EQ(samples.width, 242u);
  EXPECT_EQ(samples.height, 242u);
  EXPECT_EQ(samples.color_type, 2);
  // 8 test images over their 8 reconstructions: 2 rows of 8.
  const test::Png recon = test::read_png((out / "reconstruction.png").string());
  ASSERT_EQ(recon.error, "");
  EXPECT_EQ(recon.width, 242u);
  EXPECT_EQ(recon.height, 62u);
  // The first test image is shown as it is: somewhere in it a bright square (255).
  int bright = 0;
  for (uint32_t row = 2; row < 30; ++row)
    for (uint32_t col = 2; col < 30; ++col) bright += recon.at(row, col, 0) == 255;
  EXPECT_EQ(bright, 36);
  // Nothing else in the folder but what the run wrote (no temporary files left).
  for (const auto& e : fs::directory_iterator(out)) {
    const std::string name = e.path().filename().string();
    EXPECT_TRUE(name == "samples.png" || name == "reconstruction.png") << name;
  }
}

TEST_F(VaeExample, StopsAtMaxSteps) {
  ProcessResult r = run_vae(common() + "--epochs 2 --max-steps 13 --out " + (root_ / "short").string());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(test::result_number(r.output, "steps"), 13) << r.output;
  EXPECT_EQ(epoch_losses(r.output).size(), 2u) << r.output;  // epoch 2 trained 3 steps
  EXPECT_EQ(fs::exists(root_ / "short" / "samples.png"), io::png_output_available());
}

TEST_F(VaeExample, BadInputExitsWithAClearMessage) {
  ProcessResult missing = run_vae("--data " + (root_ / "nowhere").string() + " --out " + (root_ / "o").string());
  EXPECT_EQ(missing.status, 1) << missing.output;
  EXPECT_NE(missing.output.find("nowhere"), std::string::npos) << missing.output;
  // An output folder that cannot be made is refused before any training.
  ProcessResult bad_out = run_vae(common() + "--out /proc/ember-no/vae");
  EXPECT_EQ(bad_out.status, 1) << bad_out.output;
  EXPECT_NE(bad_out.output.find("--out /proc/ember-no/vae"), std::string::npos) << bad_out.output;
  EXPECT_EQ(bad_out.output.find("epoch 1"), std::string::npos) << bad_out.output;
  ProcessResult bad_flag = run_vae(common() + "--latent 0");
  EXPECT_NE(bad_flag.status, 0);
  EXPECT_NE(bad_flag.output.find("--latent"), std::string::npos) << bad_flag.output;
}

}  // namespace
