// build/bin/mnist end to end on a small synthetic MNIST (IDX files written here): it trains,
// writes metrics.csv / metrics.svg / checkpoints, prints the result line, rejects bad
// input with a clear message, and a run interrupted at a checkpoint and resumed ends with a
// model bit-identical to an uninterrupted run's (the CNN, so dropout's RNG state matters).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "ember/cuda.h"
#include "ember/io/onnx.h"
#include "support/onnx_runtime.h"
#include "support/test_support.h"

namespace fs = std::filesystem;
using namespace ember;

namespace {

// Images whose label is visible: class k lights up a 4x4 patch at a k-dependent place.
void write_split(const fs::path& dir, const std::string& prefix, int n, uint32_t seed) {
  ember::test::write_mnist_split(dir, prefix, n, seed, ember::test::square_per_class(64, 4, 4));
}

using ember::test::ProcessResult;

ProcessResult run_mnist(const std::string& args) {
  return ember::test::run_command(std::string(EMBER_BIN_DIR) + "/mnist " + args);
}

std::string read_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

class MnistExample : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("ember_mnist_example_" + std::to_string(getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_ / "data");
    write_split(root_ / "data", "train", 640, 1);
    write_split(root_ / "data", "t10k", 200, 2);
  }
  void TearDown() override { fs::remove_all(root_); }
  // The flags every run shares (CLI11 refuses an option given twice: --log-every is set here).
  std::string common(int log_every = 5) const {
    return "--data " + (root_ / "data").string() + " --batch-size 64 --log-every " + std::to_string(log_every) +
           " --workers 2 ";
  }
  // A CUDA run with `flags`, logging every step into root_/out: its metrics.csv's mean
  // training losses (column 2), one per step.
  std::vector<double> cuda_mean_losses(const std::string& flags, const std::string& out) {
    const fs::path dir = root_ / out;
    ProcessResult r = run_mnist(common(1) + "--device cuda --out " + dir.string() + " " + flags);
    EXPECT_EQ(r.status, 0) << r.output;
    std::ifstream csv(dir / "metrics.csv");
    std::string line;
    std::getline(csv, line);  // header
    std::vector<double> losses;
    while (std::getline(csv, line)) {
      std::stringstream row(line);
      std::string field;
      for (int col = 0; col <= 2; ++col) std::getline(row, field, ',');
      losses.push_back(std::stod(field));
    }
    return losses;
  }
  fs::path root_;
};

TEST_F(MnistExample, TrainsAndWritesMetricsCheckpointsAndResult) {
  const auto dir = root_ / "mlp";
  ProcessResult r = run_mnist(common() + "--epochs 2 --checkpoint " + dir.string());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("result: {\"test_accuracy\": "), std::string::npos) << r.output;
  // The patches make the classes easy: two epochs must learn them.
  const auto at = r.output.find("test accuracy ");
  ASSERT_NE(at, std::string::npos);
  EXPECT_GT(std::stod(r.output.substr(at + 14)), 90.0) << r.output;
  EXPECT_TRUE(fs::exists(dir / "metrics.csv"));
  EXPECT_TRUE(fs::exists(dir / "metrics.svg"));
  EXPECT_EQ(read_bytes(dir / "latest"), "step-00000020\n");
  EXPECT_TRUE(fs::exists(dir / "step-00000020" / "model.safetensors"));
  EXPECT_NE(read_bytes(dir / "metrics.csv").find("step,epoch,train_loss,train_acc,test_loss,test_acc"),
            std::string::npos);
}

// --export-onnx: ONNX Runtime, driven by the README's script (examples/onnx/mnist_onnxruntime.js)
// on the test split's raw images, gets the test accuracy mnist reported for the model it trained.
TEST_F(MnistExample, ExportedModelsScoreTheSameInOnnxRuntime) {
  if (!io::onnx_export_available()) GTEST_SKIP() << "this build has no ONNX export";
  if (std::string why = test::onnxruntime_missing(); !why.empty()) GTEST_SKIP() << why;
  for (const char* model : {"mlp", "cnn"}) {
    SCOPED_TRACE(model);
    const fs::path onnx = root_ / (std::string(model) + ".onnx");
    ProcessResult r = run_mnist(common() + "--model " + model + " --epochs 1 --out " + (root_ / model).string() +
                                " --export-onnx " + onnx.string());
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_NE(r.output.find("exported " + onnx.string()), std::string::npos) << r.output;
    const double reported = test::result_number(r.output, "test_accuracy");
    std::string log;
    ASSERT_EQ(test::run_node_script("examples/onnx/mnist_onnxruntime.js", onnx.string() + " " + (root_ / "data").string(), log), 0)
        << log;
    // The same logits up to float rounding: at most one of the 200 images may flip, and the mean
    // loss (mnist prints 6 significant digits) agrees.
    EXPECT_NEAR(test::result_number(log, "test_accuracy"), reported, 1.0 / 200 + 1e-9) << r.output << log;
    const double loss = test::result_number(r.output, "test_loss");
    EXPECT_NEAR(test::result_number(log, "test_loss"), loss, 1e-5 * loss + 1e-6) << r.output << log;
  }
}

// --deterministic: each process would otherwise measure its own choice of convolution
// algorithm per shape (ops::set_conv_autotune, as PyTorch's cudnn.benchmark), and two choices
// differ in the last bits.
TEST_F(MnistExample, ResumedRunIsBitIdenticalToAnUninterruptedOne) {
  const auto whole = root_ / "whole", parts = root_ / "parts";
  const std::string run = common() + "--model cnn --epochs 2 --deterministic ";
  ProcessResult a = run_mnist(run + "--checkpoint " + whole.string());
  ASSERT_EQ(a.status, 0) << a.output;
  // Stop after 13 steps (mid-epoch 2), then resume to the end.
  ProcessResult b1 = run_mnist(run + "--max-steps 13 --checkpoint " + parts.string());
  ASSERT_EQ(b1.status, 0) << b1.output;
  ASSERT_EQ(read_bytes(parts / "latest"), "step-00000013\n");
  ProcessResult b2 = run_mnist(run + "--resume --checkpoint " + parts.string());
  ASSERT_EQ(b2.status, 0) << b2.output;
  EXPECT_NE(b2.output.find("resumed from"), std::string::npos) << b2.output;
  const std::string m_whole = read_bytes(whole / "step-00000020" / "model.safetensors");
  const std::string m_parts = read_bytes(parts / "step-00000020" / "model.safetensors");
  ASSERT_FALSE(m_whole.empty());
  EXPECT_TRUE(m_whole == m_parts) << "resumed model differs from the uninterrupted one";
  EXPECT_TRUE(read_bytes(whole / "step-00000020" / "optimizer.safetensors") ==
              read_bytes(parts / "step-00000020" / "optimizer.safetensors"));
}

TEST_F(MnistExample, BadInputExitsWithAClearMessage) {
  ProcessResult missing = run_mnist("--data " + (root_ / "nowhere").string());
  EXPECT_EQ(missing.status, 1) << missing.output;
  EXPECT_NE(missing.output.find("nowhere"), std::string::npos) << missing.output;
  ProcessResult bad_flag = run_mnist(common() + "--model transformer");
  EXPECT_NE(bad_flag.status, 0);
  EXPECT_NE(bad_flag.output.find("--model"), std::string::npos) << bad_flag.output;
  ProcessResult resume_without_dir = run_mnist(common() + "--resume");
  EXPECT_EQ(resume_without_dir.status, 1);
  EXPECT_NE(resume_without_dir.output.find("--resume needs --checkpoint"), std::string::npos);
  // --cuda-graph needs a GPU and the MLP (refused before any data is read).
  ProcessResult graph_on_cpu = run_mnist(common() + "--cuda-graph");
  EXPECT_EQ(graph_on_cpu.status, 2);
  EXPECT_NE(graph_on_cpu.output.find("--cuda-graph needs --device cuda"), std::string::npos) << graph_on_cpu.output;
  // An ONNX file that cannot be written is refused before training: a folder in its place, a
  // folder that cannot be made.
  for (const fs::path& where : {root_, fs::path("/proc/ember-no/model.onnx")}) {
    ProcessResult bad_export = run_mnist(common() + "--export-onnx " + where.string());
    EXPECT_EQ(bad_export.status, 1) << bad_export.output;
    EXPECT_NE(bad_export.output.find("--export-onnx"), std::string::npos) << bad_export.output;
    EXPECT_EQ(bad_export.output.find("epoch 1"), std::string::npos) << bad_export.output;
  }
  // A truncated image file names the file.
  fs::resize_file(root_ / "data" / "train-images-idx3-ubyte", 1000);
  ProcessResult truncated = run_mnist(common());
  EXPECT_EQ(truncated.status, 1);
  EXPECT_NE(truncated.output.find("train-images-idx3-ubyte"), std::string::npos) << truncated.output;
}

// --cuda-graph: 3 eager steps, then the captured step replayed (cuda::GraphedStep, capturable
// AdamW). Two epochs of 10 full batches; every logged mean training loss (metrics.csv column 2)
// must be the eager run's.
TEST_F(MnistExample, CudaGraphRunMatchesTheEagerRun) {
  EMBER_SKIP_WITHOUT_CUDA();
  const std::vector<double> eager = cuda_mean_losses("--epochs 2", "eager"),
                            graphed = cuda_mean_losses("--epochs 2 --cuda-graph", "graphed");
  ASSERT_EQ(eager.size(), 20u);
  ASSERT_EQ(graphed.size(), eager.size());
  for (size_t k = 0; k < eager.size(); ++k) EXPECT_NEAR(graphed[k], eager[k], 1e-5 * std::abs(eager[k])) << "row " << k;
}

// `mnist --ddp --device cuda` in a world of one (no launcher: one rank, an NCCL group of one on
// the rank's GPU chosen by distributed::local_device): DDP's all-reduces, stream-ordered waits
// and the metrics summed over the ranks on the GPU, with every logged mean training loss equal
// to the plain run's. Before issue 18's item 1 the first launch after a polled collective threw
// cudaErrorNotReady. GPU only.
TEST_F(MnistExample, DdpOnOneCardMatchesThePlainRun) {
  EMBER_SKIP_WITHOUT_CUDA();
  const std::vector<double> plain = cuda_mean_losses("--epochs 1", "plain"),
                            ddp = cuda_mean_losses("--epochs 1 --ddp", "ddp");
  ASSERT_EQ(plain.size(), 10u);
  ASSERT_EQ(ddp.size(), plain.size());
  for (size_t k = 0; k < plain.size(); ++k) EXPECT_NEAR(ddp[k], plain[k], 1e-5 * std::abs(plain[k])) << "row " << k;
}

}  // namespace
