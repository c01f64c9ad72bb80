// build/bin/gpt end to end on small synthetic token shards (written here in llm.c's format, so
// no download is needed): it trains (the loss falls), two --deterministic runs give identical
// losses, a run stopped and resumed gives bit-identical losses to an uninterrupted one, --arch
// llama trains, a Hugging Face folder written by --save-pretrained starts a run (--init-from),
// and bad flags or files fail with a message naming them.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "ember/cuda.h"
#include "ember/ember.h"
#include "support/onnx_runtime.h"
#include "support/test_support.h"

#ifndef EMBER_BIN_DIR
#error "EMBER_BIN_DIR must name the folder holding gpt"
#endif

namespace fs = std::filesystem;

namespace {

using ember::test::ProcessResult;

ProcessResult run_gpt(const std::string& args) {
  return ember::test::run_command(std::string(EMBER_BIN_DIR) + "/gpt " + args);
}

// An llm.c shard: 256 int32 header (magic, version, count), then uint16 tokens.
void write_shard(const fs::path& path, const std::vector<uint16_t>& tokens) {
  std::vector<int32_t> header(256, 0);
  header[0] = 20240520;
  header[1] = 1;
  header[2] = int32_t(tokens.size());
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(header.data()), 256 * 4);
  f.write(reinterpret_cast<const char*>(tokens.data()), std::streamsize(tokens.size() * 2));
}

// A learnable stream: short "sentences" of a few dozen token ids in a fixed cycle.
std::vector<uint16_t> pattern_tokens(size_t n, uint16_t offset) {
  std::vector<uint16_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = uint16_t(offset + (i * 7 + i / 13) % 40);
  return t;
}

// The train_loss column of metrics.csv, as text (exact comparison).
std::vector<std::string> train_losses(const fs::path& csv) {
  std::ifstream in(csv);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line.rfind("step,train_loss,", 0), 0u) << line;
  std::vector<std::string> out;
  while (std::getline(in, line)) {
    std::stringstream s(line);
    std::string step, loss;
    std::getline(s, step, ',');
    std::getline(s, loss, ',');
    out.push_back(step + ":" + loss);
  }
  return out;
}

class GptExample : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("ember_gpt_example_" + std::to_string(getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
    write_shard(root_ / "train.bin", pattern_tokens(20000, 100));
    write_shard(root_ / "val.bin", pattern_tokens(3000, 100));
  }
  void TearDown() override { fs::remove_all(root_); }
  // Small and fast: tiny preset, 2 x 16 tokens, 2 micro-batches per step, no samples.
  std::string common(const fs::path& out) const {
    return "--data " + (root_ / "train.bin").string() + " --val-data " + (root_ / "val.bin").string() +
           " --batch-size 2 --seq-len 16 --total-batch-tokens 64 --lr 3e-3 --warmup-steps 2"
           " --eval-every 4 --eval-steps 2 --sample-every 0 --log-every 1 --seed 5 --out " + out.string() + " ";
  }
  fs::path root_;
};

TEST_F(GptExample, TrainsDeterministicallyAndResumesBitExact) {
  const fs::path a = root_ / "a", parts = root_ / "parts";
  ProcessResult ra = run_gpt(common(a) + "--steps 8 --deterministic");
  ASSERT_EQ(ra.status, 0) << ra.output;
  const std::vector<std::string> la = train_losses(a / "metrics.csv");
  ASSERT_EQ(la.size(), 8u) << ra.output;
  const double first = std::stod(la.front().substr(la.front().find(':') + 1));
  const double last = std::stod(la.back().substr(la.back().find(':') + 1));
  EXPECT_GT(first, 10.0) << "an untrained GPT-2 head starts near ln(50257) = 10.8";
  EXPECT_LT(last, first - 1.0) << ra.output;
  EXPECT_TRUE(std::isfinite(ember::test::result_number(ra.output, "val_loss"))) << ra.output;
  EXPECT_NE(ra.output.find("\"preset\": \"tiny\""), std::string::npos) << ra.output;

  ProcessResult saving = run_gpt(common(parts) + "--steps 8 --deterministic --checkpoint " +
                                 parts.string() + " --checkpoint-every 3");
  ASSERT_EQ(saving.status, 0) << saving.output;
  ASSERT_TRUE(fs::exists(parts / "step-00000006")) << saving.output;
  EXPECT_EQ(train_losses(parts / "metrics.csv"), la) << "two runs with the same seed differ";
  fs::remove_all(parts / "step-00000008");
  {
    std::ofstream latest(parts / "latest", std::ios::trunc);
    latest << "step-00000006\n";
  }
  fs::remove(parts / "metrics.csv");
  ProcessResult resumed = run_gpt(common(parts) + "--steps 8 --deterministic --checkpoint " + parts.string() +
                                  " --resume");
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from"), std::string::npos) << resumed.output;
  const std::vector<std::string> tail = train_losses(parts / "metrics.csv");
  ASSERT_EQ(tail.size(), 2u) << resumed.output;
  EXPECT_EQ(tail, std::vector<std::string>(la.begin() + 6, la.end())) << "resume is not bit-exact";

  // Sampling from the saved model needs GPT-2's tokenizer files (scripts/test.sh fetches them).
  const fs::path tokenizer = fs::path(EMBER_TEST_DATA_DIR) / ".." / ".." / "data" / "gpt2";
  if (!fs::exists(tokenizer / "encoder.json")) GTEST_SKIP() << "no " << tokenizer << ": bash scripts/fetch_data.sh gpt2";
  const std::string generate = "--generate --checkpoint " + parts.string() + " --tokenizer " + tokenizer.string() +
                               " --prompt 'Once upon' --max-new-tokens 6 --temperature 0";
  ProcessResult g1 = run_gpt(generate), g2 = run_gpt(generate);
  ASSERT_EQ(g1.status, 0) << g1.output;
  EXPECT_EQ(g1.output.rfind("Once upon", 0), 0u) << g1.output;
  EXPECT_GT(g1.output.size(), std::string("Once upon\n").size()) << g1.output;
  EXPECT_EQ(g1.output, g2.output) << "greedy sampling is deterministic";
}

// --arch llama trains the llama-tiny preset with the same loop (the loss falls from ln(50257)).
TEST_F(GptExample, LlamaArchTrains) {
  const fs::path out = root_ / "llama";
  ProcessResult r = run_gpt(common(out) + "--arch llama --steps 8 --lr 1e-2");
  ASSERT_EQ(r.status, 0) << r.output;
  const std::vector<std::string> l = train_losses(out / "metrics.csv");
  ASSERT_EQ(l.size(), 8u) << r.output;
  const double first = std::stod(l.front().substr(l.front().find(':') + 1));
  const double last = std::stod(l.back().substr(l.back().find(':') + 1));
  EXPECT_GT(first, 10.0) << r.output;
  EXPECT_LT(last, first - 1.0) << r.output;
  EXPECT_NE(r.output.find("\"preset\": \"llama-tiny\""), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\"arch\": \"llama\""), std::string::npos) << r.output;
}

// --save-pretrained writes a Hugging Face folder; --init-from starts a run from it (its first
// loss is the trained model's, not an untrained one's), and greedy samples from the folder and
// from the checkpoint saved at the same step are the same text.
TEST_F(GptExample, SavePretrainedThenInitFromContinuesTheModel) {
  const fs::path a = root_ / "a", hf = root_ / "hf", b = root_ / "b";
  ProcessResult ra = run_gpt(common(a) + "--steps 8 --checkpoint " + a.string() + " --save-pretrained " + hf.string());
  ASSERT_EQ(ra.status, 0) << ra.output;
  ASSERT_TRUE(fs::exists(hf / "config.json") && fs::exists(hf / "model.safetensors")) << ra.output;
  const std::vector<std::string> la = train_losses(a / "metrics.csv");
  const double trained = std::stod(la.back().substr(la.back().find(':') + 1));
  ProcessResult rb = run_gpt(common(b) + "--steps 2 --init-from " + hf.string());
  ASSERT_EQ(rb.status, 0) << rb.output;
  const std::vector<std::string> lb = train_losses(b / "metrics.csv");
  ASSERT_FALSE(lb.empty()) << rb.output;
  const double first = std::stod(lb.front().substr(lb.front().find(':') + 1));
  EXPECT_LT(first, 10.0) << "an untrained model starts near 10.8:\n" << rb.output;
  EXPECT_NEAR(first, trained, 1.0) << rb.output;
  EXPECT_NE(run_gpt(common(b) + "--steps 2 --arch llama --save-pretrained " + hf.string()).output.find(
                "--save-pretrained writes GPT-2 folders only"),
            std::string::npos);

  const fs::path tokenizer = fs::path(EMBER_TEST_DATA_DIR) / ".." / ".." / "data" / "gpt2";
  if (!fs::exists(tokenizer / "encoder.json")) GTEST_SKIP() << "no " << tokenizer << ": bash scripts/fetch_data.sh gpt2";
  const std::string sample = " --tokenizer " + tokenizer.string() + " --prompt 'Once upon' --max-new-tokens 6 --temperature 0";
  ProcessResult from_folder = run_gpt("--generate --init-from " + hf.string() + sample);
  ProcessResult from_checkpoint = run_gpt("--generate --checkpoint " + a.string() + sample);
  ASSERT_EQ(from_folder.status, 0) << from_folder.output;
  EXPECT_EQ(from_folder.output, from_checkpoint.output);
}

// --cuda-graph: 3 eager steps, then the captured step (both micro-batches, clipping, AdamW)
// replayed, with the warmup + cosine lr changing every step through the device lr. Every
// logged training loss must be the eager run's (GPU only; equal up to cuBLAS algorithm choice).
TEST_F(GptExample, CudaGraphRunMatchesTheEagerRun) {
  EMBER_SKIP_WITHOUT_CUDA();
  auto losses = [&](const std::string& flags, const std::string& name) {
    const fs::path out = root_ / name;
    ProcessResult r = run_gpt(common(out) + "--device cuda --steps 10 " + flags);
    EXPECT_EQ(r.status, 0) << r.output;
    std::vector<double> v;
    for (const std::string& row : train_losses(out / "metrics.csv")) v.push_back(std::stod(row.substr(row.find(':') + 1)));
    return v;
  };
  const std::vector<double> eager = losses("", "eager"), graphed = losses("--cuda-graph", "graphed");
  ASSERT_EQ(eager.size(), 10u);
  ASSERT_EQ(graphed.size(), eager.size());
  for (size_t k = 0; k < eager.size(); ++k) EXPECT_NEAR(graphed[k], eager[k], 1e-4 * std::abs(eager[k])) << "step " << k + 1;
}

// `gpt --ddp --device cuda` in a world of one (no launcher: one rank, an NCCL group of one on
// cuda:0): the NCCL path end to end (DDP's buckets and stream-ordered waits, the loss and the
// validation loss averaged over the ranks on the GPU), with losses equal to the plain run's.
// Before the fixes of issue 18 it died at step 1 (a CPU scalar all-reduced on the NCCL group,
// and cudaErrorNotReady left latched by polling a collective). GPU only.
TEST_F(GptExample, DdpOnOneCardMatchesThePlainRun) {
  EMBER_SKIP_WITHOUT_CUDA();
  auto run = [&](const std::string& flags, const std::string& name, std::string* output) {
    const fs::path out = root_ / name;
    ProcessResult r = run_gpt(common(out) + "--device cuda --steps 8 " + flags);
    EXPECT_EQ(r.status, 0) << r.output;
    *output = r.output;
    std::vector<double> v;
    for (const std::string& row : train_losses(out / "metrics.csv")) v.push_back(std::stod(row.substr(row.find(':') + 1)));
    return v;
  };
  std::string plain_out, ddp_out;
  const std::vector<double> plain = run("", "plain", &plain_out), ddp = run("--ddp", "ddp", &ddp_out);
  ASSERT_EQ(plain.size(), 8u) << plain_out;
  ASSERT_EQ(ddp.size(), plain.size()) << ddp_out;
  for (size_t k = 0; k < plain.size(); ++k) EXPECT_NEAR(ddp[k], plain[k], 1e-4 * std::abs(plain[k])) << "step " << k + 1;
  EXPECT_EQ(ember::test::result_number(ddp_out, "ranks"), 1.0) << ddp_out;
  const double val_plain = ember::test::result_number(plain_out, "val_loss"), val_ddp = ember::test::result_number(ddp_out, "val_loss");
  ASSERT_TRUE(std::isfinite(val_plain)) << plain_out;
  EXPECT_NEAR(val_ddp, val_plain, 1e-4 * std::abs(val_plain)) << ddp_out;
}

// gpt --export-onnx from a checkpoint: ONNX Runtime's logits are those of the checkpoint's model
// (rebuilt here), at a batch size and length other than the export's.
TEST_F(GptExample, ExportsACheckpointThatOnnxRuntimeRuns) {
  if (!ember::io::onnx_export_available()) GTEST_SKIP() << "this build has no ONNX export";
  if (std::string why = ember::test::onnxruntime_missing(); !why.empty()) GTEST_SKIP() << why;
  const fs::path ck = root_ / "ck", onnx = root_ / "gpt.onnx";
  ProcessResult t = run_gpt(common(ck) + "--steps 2 --checkpoint " + ck.string());
  ASSERT_EQ(t.status, 0) << t.output;
  ProcessResult e = run_gpt("--export-onnx " + onnx.string() + " --checkpoint " + ck.string());
  ASSERT_EQ(e.status, 0) << e.output;
  EXPECT_NE(e.output.find("exported " + onnx.string()), std::string::npos) << e.output;
  using namespace ember;
  std::optional<io::Checkpoint> c = io::load_latest_checkpoint(ck.string());
  ASSERT_TRUE(c.has_value());
  nn::GPT gpt(nn::GPTConfig::preset("tiny"));
  gpt.load_state_dict(c->model);
  gpt.eval();
  Generator gen(11);
  const Tensor ids = randint(0, 50257, {3, 13}, DType::i64, &gen);
  const test::OnnxRun run = test::run_onnxruntime(onnx.string(), {{"ids", ids}});
  NoGradGuard no_grad;
  const Tensor want = gpt(ids);
  ASSERT_EQ(run.outputs.at(0).sizes(), want.sizes());
  EXPECT_TRUE(test::all_close(run.outputs[0], want, 1e-5, 1e-5));
}

TEST_F(GptExample, BadFlagsAndFilesAreNamed) {
  const fs::path out = root_ / "bad";
  struct Case {
    std::string args, must_mention;
  };
  const std::vector<Case> cases = {
      {"--seq-len 65", "--seq-len"},                    // the tiny block is 64
      {"--total-batch-tokens 100", "--total-batch-tokens"},
      {"--lr nan", "--lr"},
      {"--preset gpt5", "--preset"},
      {"--data " + (root_ / "missing.bin").string(), "missing.bin"},
      {"--resume", "--resume"},
      {"--generate", "--checkpoint"},
      {"--export-onnx x.onnx", "--export-onnx needs --checkpoint DIR or --init-from DIR"},
      {"--export-onnx x.onnx --generate", "--export-onnx exports a saved model in one process"},
      {"--data " + root_.string(), "--val-data"},  // the folder holds val.bin too
      {"--cuda-graph", "--cuda-graph needs --device cuda"},
      // What the option needs, not CLI11's "not in range 0.000000 to 1797693134862315..."
      {"--eval-every -1", "--eval-every: must be zero or a positive number, not -1"},
      {"--sample-every -2", "--sample-every: must be zero or a positive number, not -2"},
  };
  for (const Case& c : cases) {
    ProcessResult r = run_gpt(common(out) + "--steps 2 " + c.args);
    EXPECT_NE(r.status, 0) << c.args << "\n" << r.output;
    EXPECT_LT(r.status, 128) << "killed by a signal: " << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find(c.must_mention), std::string::npos) << c.args << "\n" << r.output;
  }
  // A shard whose header claims more tokens than the file holds.
  std::vector<int32_t> header(256, 0);
  header[0] = 20240520;
  header[1] = 1;
  header[2] = 1 << 30;
  {
    std::ofstream f(root_ / "short.bin", std::ios::binary);
    f.write(reinterpret_cast<const char*>(header.data()), 1024);
  }
  ProcessResult r = run_gpt(common(out) + "--steps 2 --data " + (root_ / "short.bin").string());
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("short.bin"), std::string::npos) << r.output;
}

// A learning rate of 1e30 blows the loss up at step 2: the run says so and stops with exit 3,
// keeping the step-1 checkpoint (saved every step) as the latest, never a poisoned one.
TEST_F(GptExample, NonFiniteLossStopsWithoutSaving) {
  const fs::path ck = root_ / "nan";
  ProcessResult r = run_gpt(common(ck) + "--steps 6 --lr 1e30 --warmup-steps 0 --checkpoint " + ck.string() +
                            " --checkpoint-every 1");
  EXPECT_EQ(r.status, 3) << r.output;
  EXPECT_NE(r.output.find("stopping without saving a checkpoint"), std::string::npos) << r.output;
  std::ifstream latest(ck / "latest");
  std::string name;
  std::getline(latest, name);
  EXPECT_EQ(name, "step-00000001") << r.output;
  EXPECT_FALSE(fs::exists(ck / "step-00000002")) << r.output;
}

}  // namespace
