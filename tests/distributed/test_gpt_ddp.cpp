// examples/gpt --ddp end to end: `mpirun -np 2 gpt --ddp` with B rows per rank trains as `gpt`
// in one process with 2B rows (the independent reference): TokenShards gives the two ranks the
// two halves of the same global batch, and DDP averages their gradients, so the logged losses
// and the final weights agree within f32 round-off amplified by Adam. Two micro-batches per step exercise
// no_sync. Runs in the single-process invocation (it calls mpirun).
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "dist_util.h"

namespace fs = std::filesystem;
using namespace ember;

namespace {

void write_shard(const fs::path& path, size_t n) {
  std::vector<int32_t> header(256, 0);
  header[0] = 20240520;
  header[1] = 1;
  header[2] = int32_t(n);
  std::vector<uint16_t> tokens(n);
  for (size_t i = 0; i < n; ++i) tokens[i] = uint16_t(100 + (i * 7 + i / 13) % 40);
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(header.data()), 1024);
  f.write(reinterpret_cast<const char*>(tokens.data()), std::streamsize(n * 2));
}

std::pair<int, std::string> run_command(const std::string& cmd) {
  ember::test::ProcessResult r = ember::test::run_command(cmd);
  return {r.status, std::move(r.output)};
}

// metrics.csv's train_loss column.
std::vector<double> train_losses(const fs::path& csv) {
  std::ifstream in(csv);
  std::string line;
  std::getline(in, line);
  std::vector<double> out;
  while (std::getline(in, line)) {
    std::stringstream s(line);
    std::string step, loss;
    std::getline(s, step, ',');
    std::getline(s, loss, ',');
    out.push_back(std::stod(loss));
  }
  return out;
}

}  // namespace

TEST(GptDdp, TwoRanksTrainAsOneProcessWithTwiceTheRows) {
#if !defined(EMBER_MPIEXEC) || !defined(EMBER_BIN_DIR)
  GTEST_SKIP() << "this build has no MPI";
#else
  if (distributed::world_size() > 1) GTEST_SKIP() << "runs mpirun itself: only in the single-process run";
  const fs::path root = fs::temp_directory_path() / ("ember_gpt_ddp_" + std::to_string(getpid()));
  fs::remove_all(root);
  fs::create_directories(root);
  write_shard(root / "train.bin", 20000);
  write_shard(root / "val.bin", 3000);
  const std::string gpt = std::string(EMBER_BIN_DIR) + "/gpt";
  const std::string args = " --data " + (root / "train.bin").string() + " --val-data " + (root / "val.bin").string() +
                           " --seq-len 16 --total-batch-tokens 128 --lr 3e-3 --warmup-steps 2 --eval-every 3"
                           " --eval-steps 2 --sample-every 0 --log-every 1 --seed 5 --steps 6";
  auto [s1, out1] = run_command("OMP_NUM_THREADS=1 " + gpt + args + " --batch-size 2 --checkpoint " +
                                (root / "single").string());
  ASSERT_EQ(s1, 0) << out1;
  auto [s2, out2] = run_command(test::without_leak_check() + "OMP_NUM_THREADS=1 " + EMBER_MPIEXEC + " -np 2 " +
                                EMBER_MPIEXEC_FLAGS + " " + gpt + args + " --batch-size 1 --ddp --checkpoint " +
                                (root / "ddp").string());
  ASSERT_EQ(s2, 0) << out2;
  EXPECT_EQ(out2.find("result: {"), out2.rfind("result: {")) << "only rank 0 prints\n" << out2;
  const std::vector<double> l1 = train_losses(root / "single" / "metrics.csv");
  const std::vector<double> l2 = train_losses(root / "ddp" / "metrics.csv");
  ASSERT_EQ(l1.size(), 6u) << out1;
  ASSERT_EQ(l2.size(), 6u) << out2;
  for (size_t i = 0; i < l1.size(); ++i) EXPECT_NEAR(l1[i], l2[i], 1e-5) << "step " << i + 1;
  const StateDict a = io::load_safetensors((root / "single" / "step-00000006" / "model.safetensors").string());
  const StateDict b = io::load_safetensors((root / "ddp" / "step-00000006" / "model.safetensors").string());
  ASSERT_EQ(a.size(), b.size());
  double diff = 0;
  for (const auto& [name, t] : a) diff = std::max(diff, test::max_abs_diff(t, b.at(name)));
  std::printf("gpt --ddp (2 ranks x 1 row) vs one process x 2 rows, 6 AdamW steps: max weight difference %.3g\n",
              diff);
  // Adam divides by sqrt(v): a gradient that differs in its last bits moves a weight by up to
  // about lr * 1e-3 per step here (7e-6 measured; the weights moved by up to 1.8e-2).
  EXPECT_LT(diff, 5e-5);
  fs::remove_all(root);
#endif
}

// examples/gpt --fsdp end to end: `mpirun -np 2 gpt --fsdp` trains exactly as `mpirun -np 2
// gpt --ddp` (the same gradients averaged the same way, fsdp.h; 4 micro-batches per step
// exercise no_sync, the evaluations FSDP's no-grad forward, --save-pretrained the gathering of
// the whole model): the same losses and weights, bit for bit. The clipping threshold is out of
// reach: FSDP's norm sums the shards' squares per rank, then over the ranks, in f64, where
// optim::clip_grad_norm_ goes tensor by tensor, so an active clip would scale by coefficients
// that differ in their last bits (5e-6 in the weights after 6 steps; clip_grad_norm_ over
// shards is checked in test_fsdp.cpp).
TEST(GptFsdp, TwoRanksTrainAsDdpDoes) {
#if !defined(EMBER_MPIEXEC) || !defined(EMBER_BIN_DIR)
  GTEST_SKIP() << "this build has no MPI";
#else
  if (distributed::world_size() > 1) GTEST_SKIP() << "runs mpirun itself: only in the single-process run";
  const fs::path root = fs::temp_directory_path() / ("ember_gpt_fsdp_" + std::to_string(getpid()));
  fs::remove_all(root);
  fs::create_directories(root);
  write_shard(root / "train.bin", 20000);
  write_shard(root / "val.bin", 3000);
  const std::string gpt = std::string(EMBER_BIN_DIR) + "/gpt";
  const std::string args = " --data " + (root / "train.bin").string() + " --val-data " + (root / "val.bin").string() +
                           " --seq-len 16 --batch-size 1 --total-batch-tokens 128 --lr 3e-3 --warmup-steps 2"
                           " --eval-every 3 --eval-steps 2 --sample-every 0 --log-every 1 --seed 5 --steps 6 --grad-clip 1e9";
  const std::string mpirun = test::without_leak_check() + "OMP_NUM_THREADS=1 " + EMBER_MPIEXEC + " -np 2 " +
                             EMBER_MPIEXEC_FLAGS + " " + gpt + args;
  std::vector<std::vector<double>> losses;
  std::vector<StateDict> weights;
  for (const std::string mode : {"ddp", "fsdp"}) {
    auto [status, out] = run_command(mpirun + " --" + mode + " --out " + (root / mode).string() +
                                     " --save-pretrained " + (root / (mode + "_hf")).string());
    ASSERT_EQ(status, 0) << out;
    losses.push_back(train_losses(root / mode / "metrics.csv"));
    ASSERT_EQ(losses.back().size(), 6u) << out;
    weights.push_back(io::load_safetensors((root / (mode + "_hf") / "model.safetensors").string()));
  }
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(losses[0][i], losses[1][i]) << "step " << i + 1;
  ASSERT_EQ(weights[0].size(), weights[1].size());
  double diff = 0;
  for (const auto& [name, t] : weights[0]) diff = std::max(diff, test::max_abs_diff(t, weights[1].at(name)));
  std::printf("gpt --fsdp vs gpt --ddp (2 ranks, 6 AdamW steps): max weight difference %.3g\n", diff);
  EXPECT_EQ(diff, 0.0);
  fs::remove_all(root);
#endif
}

// gpt --fsdp --checkpoint: a sharded checkpoint written by 4 ranks, resumed as if the job had
// died right after it (latest pointed back at it), continues on 4 ranks bit for bit as the
// uninterrupted run and on 2 ranks (twice the rows each: the same global batches) within
// round-off.
TEST(GptFsdp, ShardedCheckpointResumesOnFewerRanks) {
#if !defined(EMBER_MPIEXEC) || !defined(EMBER_BIN_DIR)
  GTEST_SKIP() << "this build has no MPI";
#else
  if (distributed::world_size() > 1) GTEST_SKIP() << "runs mpirun itself: only in the single-process run";
  const fs::path root = fs::temp_directory_path() / ("ember_gpt_fsdp_ckpt_" + std::to_string(getpid()));
  fs::remove_all(root);
  fs::create_directories(root);
  write_shard(root / "train.bin", 20000);
  const std::string gpt = std::string(EMBER_BIN_DIR) + "/gpt";
  const std::string args = " --fsdp --data " + (root / "train.bin").string() +
                           " --seq-len 16 --total-batch-tokens 128 --lr 3e-3 --warmup-steps 2 --eval-every 0"
                           " --sample-every 0 --log-every 1 --seed 5 --steps 6 --checkpoint-every 3";
  auto mpirun = [&](int np) {
    return test::without_leak_check() + "OMP_NUM_THREADS=1 " + EMBER_MPIEXEC + " -np " + std::to_string(np) + " " +
           EMBER_MPIEXEC_FLAGS + " " + gpt + args;
  };
  auto [s1, out1] = run_command(mpirun(4) + " --batch-size 1 --checkpoint " + (root / "a").string() +
                                " --save-pretrained " + (root / "a_hf").string());
  ASSERT_EQ(s1, 0) << out1;
  ASSERT_TRUE(fs::exists(root / "a" / "step-00000003" / "rank-00003-of-00004.safetensors")) << out1;
  // The job "died" after step 3: two copies of the folder with latest pointing there.
  for (const char* copy : {"b", "c"}) {
    fs::copy(root / "a", root / copy, fs::copy_options::recursive);
    std::ofstream(root / copy / "latest") << "step-00000003\n";
  }
  auto [s2, out2] = run_command(mpirun(4) + " --batch-size 1 --resume --checkpoint " + (root / "b").string() +
                                " --save-pretrained " + (root / "b_hf").string());
  ASSERT_EQ(s2, 0) << out2;
  EXPECT_NE(out2.find("resumed from"), std::string::npos) << out2;
  auto [s3, out3] = run_command(mpirun(2) + " --batch-size 2 --resume --checkpoint " + (root / "c").string() +
                                " --save-pretrained " + (root / "c_hf").string());
  ASSERT_EQ(s3, 0) << out3;
  EXPECT_NE(out3.find("saved by 4 ranks"), std::string::npos) << out3;
  // metrics.csv holds the first run's 6 steps, then the resumed run's steps 4-6.
  const std::vector<double> la = train_losses(root / "a" / "metrics.csv");
  const std::vector<double> lb = train_losses(root / "b" / "metrics.csv");
  const std::vector<double> lc = train_losses(root / "c" / "metrics.csv");
  ASSERT_EQ(la.size(), 6u) << out1;
  ASSERT_EQ(lb.size(), 9u) << out2;
  ASSERT_EQ(lc.size(), 9u) << out3;
  for (size_t i = 3; i < 6; ++i) {
    EXPECT_EQ(lb[i + 3], la[i]) << "step " << i + 1;
    EXPECT_NEAR(lc[i + 3], la[i], 1e-5) << "step " << i + 1;
  }
  const StateDict wa = io::load_safetensors((root / "a_hf" / "model.safetensors").string());
  double db = 0, dc = 0;
  for (const char* run : {"b", "c"}) {
    const StateDict w = io::load_safetensors((root / (std::string(run) + "_hf") / "model.safetensors").string());
    double& d = run[0] == 'b' ? db : dc;
    for (const auto& [name, t] : wa) d = std::max(d, test::max_abs_diff(t, w.at(name)));
  }
  std::printf("gpt --fsdp checkpoint of 4 ranks at step 3, 3 more steps: resumed on 4 ranks %.3g, on 2 ranks %.3g\n",
              db, dc);
  EXPECT_EQ(db, 0.0);
  EXPECT_LT(dc, 1e-4);
  // Another split of the global batch would read other rows: refused.
  auto [s4, out4] = run_command(mpirun(2) + " --batch-size 1 --resume --checkpoint " + (root / "c").string());
  EXPECT_NE(s4, 0);
  EXPECT_NE(out4.find("micro_batch_rows"), std::string::npos) << out4;
  fs::remove_all(root);
#endif
}

// gpt --tp 2 --fsdp on 4 ranks (a 2 x 2 mesh: heads and MLP split in each row, the rows sharded
// data parallel) trains as one process with the whole global batch: the same losses within
// f32 round-off (the split sums and the clipped norm add in other orders).
TEST(GptTp, TwoByTwoMeshTrainsAsOneProcess) {
#if !defined(EMBER_MPIEXEC) || !defined(EMBER_BIN_DIR)
  GTEST_SKIP() << "this build has no MPI";
#else
  if (distributed::world_size() > 1) GTEST_SKIP() << "runs mpirun itself: only in the single-process run";
  const fs::path root = fs::temp_directory_path() / ("ember_gpt_tp_" + std::to_string(getpid()));
  fs::remove_all(root);
  fs::create_directories(root);
  write_shard(root / "train.bin", 20000);
  const std::string gpt = std::string(EMBER_BIN_DIR) + "/gpt";
  const std::string args = " --data " + (root / "train.bin").string() +
                           " --seq-len 16 --total-batch-tokens 128 --lr 3e-3 --warmup-steps 2 --eval-every 0"
                           " --sample-every 0 --log-every 1 --seed 5 --steps 6";
  auto [s1, out1] = run_command("OMP_NUM_THREADS=1 " + gpt + args + " --batch-size 8 --out " + (root / "one").string());
  ASSERT_EQ(s1, 0) << out1;
  auto [s2, out2] = run_command(test::without_leak_check() + "OMP_NUM_THREADS=1 " + EMBER_MPIEXEC + " -np 4 " +
                                EMBER_MPIEXEC_FLAGS + " " + gpt + args + " --batch-size 4 --tp 2 --fsdp --out " +
                                (root / "mesh").string());
  ASSERT_EQ(s2, 0) << out2;
  EXPECT_NE(out2.find("\"tp\": 2"), std::string::npos) << out2;
  const std::vector<double> l1 = train_losses(root / "one" / "metrics.csv");
  const std::vector<double> l2 = train_losses(root / "mesh" / "metrics.csv");
  ASSERT_EQ(l1.size(), 6u) << out1;
  ASSERT_EQ(l2.size(), 6u) << out2;
  for (size_t i = 0; i < 6; ++i) EXPECT_NEAR(l1[i], l2[i], 1e-5) << "step " << i + 1;
  // --tp that does not divide the ranks, or leaves data-parallel rows without --ddp/--fsdp.
  auto [s3, out3] = run_command(test::without_leak_check() + "OMP_NUM_THREADS=1 " + EMBER_MPIEXEC + " -np 4 " +
                                EMBER_MPIEXEC_FLAGS + " " + gpt + args + " --batch-size 4 --tp 2");
  EXPECT_NE(s3, 0);
  EXPECT_NE(out3.find("add --ddp or --fsdp"), std::string::npos) << out3;
  fs::remove_all(root);
#endif
}
