// bench_mnist: MNIST training throughput (samples/s) of ember against PyTorch, same recipe,
// same run. The peer is bench/peers/torch_mnist.py under the Python that has torch (Debian's
// python3-torch on the CPU, the GPU machine's PyTorch there); both sides train from the
// normalized images held in memory, so the input pipeline is not what is measured.
//
//   build/bin/bench_mnist [--model mlp|cnn] [--steps N] [--batch-size B] [--device cpu|cuda]
//                         [--threads T] [--python /usr/bin/python3] [--no-peer]
//                         [--amp off|bf16|fp16] [--profile N]
//
// --amp runs ember's forward and loss under amp::autocast (fp16 adds amp::GradScaler, whose
// step reads one device flag per step), and the peer under torch.autocast (+ GradScaler for
// fp16 on CUDA) with the same dtype.
//
// Prints ember's per-phase times (forward, backward, optimizer) to show where a step goes,
// with --profile N the profiler table (ops by self CPU or CUDA time) of N more eager ember
// steps after timing, then one `result: {json}` line with both rates and ratio = ember / peer (> 1: ember faster).
// On a CPU peer, Debian's torch uses whatever libblas.so.3 the system selects: install
// libopenblas0-pthread or the peer runs on the reference BLAS and is over 10x slower; the peer
// reports which one it ran on (bench/peers/peer_blas.py), the result line says it as
// "peer_blas" and a warning is printed when it is the reference one.
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

#include <CLI/CLI.hpp>
#include <ember/amp.h>
#include <ember/ember.h>
#include "bench_harness.h"

using namespace ember;

namespace {

struct Classifier : nn::Module {
  virtual Tensor forward(const Tensor& x) = 0;
};
struct Mlp : Classifier {
  nn::Linear fc1{784, 512}, fc2{512, 256}, fc3{256, 10};
  Mlp() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
    register_module("fc3", fc3);
  }
  Tensor forward(const Tensor& x) override { return fc3(relu(fc2(relu(fc1(x.flatten(1)))))); }
};
struct Cnn : Classifier {
  nn::Conv2d conv1{1, 32, 3}, conv2{32, 64, 3};
  nn::MaxPool2d pool{2};
  nn::Dropout dropout1{0.25}, dropout2{0.5};
  nn::Linear fc1{9216, 128}, fc2{128, 10};
  Cnn() {
    register_module("conv1", conv1);
    register_module("conv2", conv2);
    register_module("dropout1", dropout1);
    register_module("dropout2", dropout2);
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = dropout1(pool(relu(conv2(relu(conv1(x)))))).flatten(1);
    return fc2(dropout2(relu(fc1(h))));
  }
};

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_name = "mlp", device_name = "cpu", python = "/usr/bin/python3", amp_mode = "off";
  std::string data_dir = std::string(EMBER_SOURCE_DIR) + "/data/mnist";
  int64_t steps = 200, warmup = 10, batch = 128, profile_steps = 0;
  int threads = omp_get_max_threads();
  bool no_peer = false, cuda_graph = false;
  CLI::App app{"MNIST training throughput: ember vs PyTorch"};
  app.add_option("--model", model_name)->check(CLI::IsMember({"mlp", "cnn"}));
  app.add_option("--steps", steps)->check(ember::examples::PositiveNumber);
  app.add_option("--warmup", warmup)->check(ember::examples::NonNegativeNumber);
  app.add_option("--batch-size", batch)->check(ember::examples::PositiveNumber);
  app.add_option("--device", device_name)->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--threads", threads, "CPU threads for both sides")->check(ember::examples::PositiveNumber);
  app.add_option("--data", data_dir);
  app.add_option("--python", python, "the Python whose torch is the peer");
  app.add_flag("--no-peer", no_peer);
  app.add_flag("--cuda-graph", cuda_graph,
               "ember's step captured in a CUDA graph after the warm-up and replayed (--device cuda, mlp)");
  app.add_option("--amp", amp_mode, "ember's mixed precision: off, bf16 (autocast), fp16 (autocast + GradScaler)")
      ->check(CLI::IsMember({"off", "bf16", "fp16"}));
  app.add_option("--profile", profile_steps, "after timing, profile this many eager ember steps and print the table")
      ->check(ember::examples::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);
  if (cuda_graph && (device_name != "cuda" || model_name != "mlp")) {
    std::fprintf(stderr, "bench_mnist: --cuda-graph needs --device cuda and --model mlp (the cnn's dropout "
                         "would replay one mask)\n");
    return 2;
  }
  omp_set_num_threads(threads);
  const Device dev = device_name == "cuda" ? Device::cuda(0) : Device::cpu();

  // ---- data: the real images when fetched, else random ones of the same shape ----
  Tensor x_all, y_all;
  const bool real = std::filesystem::exists(data_dir + "/train-images-idx3-ubyte");
  if (real) {
    data::MNIST train(data_dir, data::Split::train, {.normalize = true});
    std::vector<int64_t> all(size_t(train.size()));
    for (size_t i = 0; i < all.size(); ++i) all[i] = int64_t(i);
    auto batch_all = train.get_batch(all);
    x_all = batch_all.data.to(dev);
    y_all = batch_all.target.to(dev);
  } else {
    x_all = randn({60000, 1, 28, 28}, dev);
    y_all = randint(0, 10, {60000}, TensorOptions(DType::i64).device(dev));
  }
  const int64_t n = x_all.size(0);

  manual_seed(0);
  std::unique_ptr<Classifier> model;
  if (model_name == "cnn") model = std::make_unique<Cnn>();
  else model = std::make_unique<Mlp>();
  model->to(dev);
  optim::AdamW opt(model->parameters(), {.lr = 1e-3, .weight_decay = 0.01, .capturable = cuda_graph});
  Tensor perm = randperm(n).to(dev);
  const bool use_amp = amp_mode != "off";
  const DType amp_dtype = amp_mode == "fp16" ? DType::f16 : DType::bf16;
  amp::GradScaler scaler({.enabled = amp_mode == "fp16"});  // bf16 needs no loss scaling

  double t_fwd = 0, t_bwd = 0, t_opt = 0;
  auto step = [&](int64_t i, bool timed) {
    const int64_t start = (i * batch) % (n - batch);
    Tensor idx = perm.narrow(0, start, batch);
    auto t0 = Clock::now();
    Tensor loss;
    {
      amp::autocast ac(dev, amp_dtype, use_amp);
      loss = cross_entropy(model->forward(x_all.index_select(0, idx)), y_all.index_select(0, idx));
    }
    auto t1 = Clock::now();
    opt.zero_grad();
    scaler.scale(loss).backward();
    auto t2 = Clock::now();
    scaler.step(opt);
    scaler.update();
    if (timed) {
      t_fwd += std::chrono::duration<double, std::milli>(t1 - t0).count();
      t_bwd += std::chrono::duration<double, std::milli>(t2 - t1).count();
      t_opt += ms_since(t2);
    }
    return loss;
  };
  // --cuda-graph: the step reads its batch through a static index tensor; the warm-up steps
  // run eagerly, then the step is captured and every timed step is one replay.
  Tensor idx_static = zeros({batch}, TensorOptions(DType::i64).device(dev)), graph_loss;
  cuda::GraphedStep graphed(
      [&] {
        amp::autocast ac(dev, amp_dtype, use_amp);
        graph_loss = cross_entropy(model->forward(x_all.index_select(0, idx_static)), y_all.index_select(0, idx_static));
        opt.zero_grad();
        scaler.scale(graph_loss).backward();
        scaler.step(opt);
        scaler.update();
      },
      /*warmup_steps=*/int(std::max<int64_t>(warmup, 1)));
  auto graph_step = [&](int64_t i) {
    idx_static.copy_(perm.narrow(0, (i * batch) % (n - batch), batch));
    graphed();
    return graph_loss;
  };
  for (int64_t i = 0; i < warmup; ++i) cuda_graph ? graph_step(i) : step(i, false);
  if (dev.is_cuda()) cuda::synchronize();
  const auto t0 = Clock::now();
  Tensor loss;
  for (int64_t i = 0; i < steps; ++i) loss = cuda_graph ? graph_step(warmup + i) : step(warmup + i, true);
  loss.item<double>();
  if (dev.is_cuda()) cuda::synchronize();
  const double seconds = ms_since(t0) / 1e3;
  const double ember_rate = double(steps * batch) / seconds;
  std::printf("ember  %s %s%s amp %s batch %lld, %d threads, %s data: %.1f samples/s (%.3f ms/step: forward "
              "%.3f, backward %.3f, optimizer %.3f), final loss %.4f\n",
              model_name.c_str(), device_name.c_str(), cuda_graph ? " cuda-graph" : "", amp_mode.c_str(),
              (long long)batch, threads, real ? "MNIST" : "random", ember_rate, 1e3 * seconds / double(steps), t_fwd / double(steps),
              t_bwd / double(steps), t_opt / double(steps), loss.item<double>());
  bench::print_step_profile(profile_steps, warmup + steps, dev, [&](int64_t i) { step(i, false); }, 20);
  std::fflush(stdout);

  // The peer at its best: Debian's torch with OpenBLAS runs each GEMM on OpenBLAS's own
  // threads on top of torch's OpenMP threads, which oversubscribes a small machine badly
  // (3x slower here with 2 cores); so it is also run with OPENBLAS_NUM_THREADS=1 and the
  // faster of the two is the reference.
  double peer_rate = 0;
  std::string peer_version = "none", peer_env = "";
  std::string peer_blas = "unknown";  // bench/peers/peer_blas.py: "reference" is no fair peer
  if (!no_peer) {
    const std::string script = std::string(EMBER_SOURCE_DIR) + "/bench/peers/torch_mnist.py";
    for (const std::string env : {"", "OPENBLAS_NUM_THREADS=1 "}) {
      const std::string cmd = env + python + " " + script + " --model " + model_name + " --steps " +
                              std::to_string(steps) + " --warmup " + std::to_string(warmup) +
                              " --batch-size " + std::to_string(batch) + " --threads " +
                              std::to_string(threads) + " --device " + device_name + " --amp " + amp_mode +
                              (real ? " --data " + data_dir : " --random") + " 2>&1";
      FILE* p = popen(cmd.c_str(), "r");
      if (!p) continue;
      char line[512], version[128], blas[64];
      double rate = 0, secs = 0;
      int peer_threads = 0;
      while (std::fgets(line, sizeof line, p)) {
        if (std::sscanf(line, "peer: %lf %lf %127s %d", &rate, &secs, version, &peer_threads) == 4) {
          std::printf("torch  %s %s: %.1f samples/s\n", version, env.empty() ? "(default env)" : env.c_str(), rate);
          if (rate > peer_rate) peer_rate = rate, peer_version = version, peer_env = env;
        } else if (std::sscanf(line, "peer_blas: %63s", blas) == 1) {
          peer_blas = blas;
        } else {
          std::fputs(line, stdout);
        }
      }
      pclose(p);
    }
    if (peer_rate <= 0) std::printf("torch  peer did not run (is torch importable by %s?)\n", python.c_str());
  }
  std::printf("result: {\"bench\": \"mnist_train\", \"model\": \"%s\", \"device\": \"%s\", \"cuda_graph\": %s, "
              "\"amp\": \"%s\", \"batch\": %lld, \"threads\": %d, \"ember_samples_per_s\": %.1f, "
              "\"peer_samples_per_s\": %.1f, \"ratio\": %.3f, \"peer\": \"torch %s%s\", \"peer_blas\": \"%s\"}\n",
              model_name.c_str(), device_name.c_str(), cuda_graph ? "true" : "false", amp_mode.c_str(), (long long)batch,
              threads, ember_rate,
              peer_rate, peer_rate > 0 ? ember_rate / peer_rate : 0.0, peer_version.c_str(),
              peer_env.empty() ? "" : (" " + peer_env.substr(0, peer_env.size() - 1)).c_str(), peer_blas.c_str());
  return 0;
}
