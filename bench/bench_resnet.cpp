// bench_resnet: one training step of examples/resnet.cpp's ResNet (the same model, from
// examples/common/resnet_model.h) against its PyTorch twin (bench/peers/resnet_peer.py) in
// the same run, same thread count and device: forward, cross-entropy, backward, SGD (momentum
// 0.9, Nesterov, weight decay 5e-4) and the OneCycleLR step, at batch 128 of 1x28x28 images.
// Both sides train on a few random batches held in memory (on the device), so the input
// pipeline is not measured.
//
//   build/bin/bench_resnet [--device cpu|cuda] [--amp off|bf16] [--cudnn-benchmark] [--steps 20]
//                          [--warmup 3] [--batch-size 128] [--threads N] [--python PY] [--no-peer]
//                          [--profile N] [--memory-format channels_last|contiguous]
//
// Prints ember's images/s with its per-phase medians (forward, backward, optimizer: on CUDA
// the host's time to issue each phase, the step being asynchronous; when their sum is near
// the step's time, the step is bound by the host), each peer run, and with --profile N the
// profiler table (ops by self CPU or CUDA time) of N more ember steps; then one `result:
// {json}` line with both rates and ratio = ember / peer (> 1: ember faster). --amp bf16 runs
// the forward and loss under autocast on both sides; --cudnn-benchmark turns on cuDNN's
// measured algorithm choice on both sides (ops::set_cudnn_benchmark, torch.backends.cudnn.
// benchmark; off, both take cuDNN's heuristics, PyTorch's default).
// --memory-format: ember's activations' layout on the CPU (Note [Memory format]; the example's
// default, channels_last: the batches converted); NCHW on CUDA, both sides. On the CPU the
// peer runs in both layouts (channels_last: model and batches, PyTorch's advice for CPU CNNs),
// each as is and with OPENBLAS_NUM_THREADS=1 (OpenBLAS's own threads on top of torch's OpenMP
// ones oversubscribe a small machine), and the fastest of the four runs is the reference;
// "peer_blas" says which BLAS it ran on (bench/peers/peer_blas.py): "reference" means
// Debian's torch found the netlib BLAS and the ratio is not against a fair peer. On CUDA the
// peer runs once.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <ember/amp.h>
#include <ember/ember.h>
#include <ember/ops/conv.h>
#include <ember/profiler.h>

#include "../examples/common/resnet_model.h"
#include "bench_harness.h"
#include "../examples/common/cli_checks.h"

using namespace ember;

namespace {

using Clock = std::chrono::steady_clock;
double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}
double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  bench::PeerArgs a;
  int64_t steps = 20, warmup = 3, batch = 128;
  int profile_steps = 0;
  std::string amp_mode = "off", memory_format = "channels_last";
  bool cudnn_benchmark = false;
  CLI::App app{"ResNet (examples/resnet.cpp) training-step throughput: ember vs PyTorch"};
  bench::add_device_option(app, a);
  app.add_option("--amp", amp_mode, "forward and loss under autocast: off or bf16")
      ->check(CLI::IsMember({"off", "bf16"}));
  app.add_flag("--cudnn-benchmark", cudnn_benchmark, "time cuDNN's algorithms per convolution shape (both sides)");
  app.add_option("--memory-format", memory_format, "ember's activation layout: channels_last or contiguous")
      ->check(CLI::IsMember({"channels_last", "contiguous"}));
  app.add_option("--steps", steps, "timed steps")->check(ember::examples::PositiveNumber);
  app.add_option("--warmup", warmup)->check(ember::examples::NonNegativeNumber);
  app.add_option("--batch-size", batch)->check(ember::examples::PositiveNumber);
  bench::add_peer_options(app, a);
  app.add_option("--profile", profile_steps, "after timing, profile this many ember steps and print the table")
      ->check(ember::examples::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);
  omp_set_num_threads(a.threads);
  const int threads = a.threads;
  const Device dev = a.device();
  const bool use_amp = amp_mode == "bf16";
  // ember's CUDA convolutions read NCHW (channels_last is a CPU layout in ember today): on CUDA
  // both sides run NCHW, whatever --memory-format says.
  if (dev.is_cuda()) memory_format = "contiguous";
  ops::set_cudnn_benchmark(cudnn_benchmark);

  manual_seed(0);
  examples::ResNet model;
  model.to(dev);
  const double lr = 0.1;
  optim::SGD opt(model.parameters(), {.lr = lr, .momentum = 0.9, .weight_decay = 5e-4, .nesterov = true});
  // One "epoch" long enough for every step taken here (the schedule's arithmetic is the cost).
  optim::OneCycleLR sched(opt, lr, {.epochs = 1, .steps_per_epoch = warmup + steps + profile_steps + 1});
  constexpr int kBatches = 4;  // a few distinct batches, cycled
  std::vector<Tensor> xs, ys;
  for (int i = 0; i < kBatches; ++i) {
    xs.push_back(randn({batch, 1, 28, 28}).to(dev).contiguous(
        memory_format == "channels_last" ? MemoryFormat::channels_last : MemoryFormat::contiguous));
    ys.push_back(randint(0, 10, {batch}, TensorOptions(DType::i64)).to(dev));
  }

  std::vector<double> fwd_ms, bwd_ms, opt_ms;
  auto step = [&](int64_t i, bool timed) {
    const auto t0 = Clock::now();
    Tensor loss;
    {
      amp::autocast ac(dev, DType::bf16, use_amp);
      loss = cross_entropy(model.forward(xs[size_t(i % kBatches)]), ys[size_t(i % kBatches)]);
    }
    const auto t1 = Clock::now();
    opt.zero_grad();
    loss.backward();
    const auto t2 = Clock::now();
    opt.step();
    sched.step();
    if (timed) {
      fwd_ms.push_back(ms_between(t0, t1));
      bwd_ms.push_back(ms_between(t1, t2));
      opt_ms.push_back(ms_between(t2, Clock::now()));
    }
    return loss;
  };
  for (int64_t i = 0; i < warmup; ++i) step(i, false);
  if (dev.is_cuda()) cuda::synchronize();
  const auto t0 = Clock::now();
  Tensor loss;
  for (int64_t i = 0; i < steps; ++i) loss = step(warmup + i, true);
  if (dev.is_cuda()) cuda::synchronize();
  const double seconds = ms_between(t0, Clock::now()) / 1e3;
  const double ember_rate = double(steps * batch) / seconds;
  std::printf("ember  resnet %s %s amp %s%s batch %lld, %d threads: %.1f images/s (%.2f ms/step; medians%s: forward "
              "%.2f, backward %.2f, optimizer %.2f), loss %.4f\n",
              a.device_name.c_str(), memory_format.c_str(), amp_mode.c_str(),
              cudnn_benchmark ? " cudnn-benchmark" : "", (long long)batch, threads, ember_rate,
              1e3 * seconds / double(steps), dev.is_cuda() ? " of the host's time to issue" : "",
              median(fwd_ms), median(bwd_ms), median(opt_ms), loss.item<double>());
  // The memory of one more step (CPU): the process's peak resident set (reset at the step's
  // start) and the peak of ember's live tensor and workspace bytes above the step's start.
  double ember_peak_rss_mb = 0, ember_rss_start_mb = 0, ember_tensor_peak_mb = 0;
  if (!dev.is_cuda()) {
    ember_rss_start_mb = double(bench::proc_status_bytes("VmRSS")) / 1e6;
    bench::reset_peak_rss();
    reset_peak_cpu_memory_stats();
    const int64_t live = cpu_memory_stats().allocated_bytes;
    step(warmup + steps, false);
    ember_peak_rss_mb = double(bench::proc_status_bytes("VmHWM")) / 1e6;
    ember_tensor_peak_mb = double(cpu_memory_stats().peak_allocated_bytes - live) / 1e6;
    std::printf("ember  memory of one step: peak RSS %.1f MB (%.1f MB at its start); tensors and workspaces "
                "live at the peak: %.1f MB above the start\n",
                ember_peak_rss_mb, ember_rss_start_mb, ember_tensor_peak_mb);
  }
  bench::print_step_profile(profile_steps, warmup + steps, dev, [&](int64_t i) { step(i, false); }, 25);
  std::fflush(stdout);

  double peer_rate = 0, peer_peak_rss_mb = 0;
  std::string peer_version = "none", peer_env, peer_format, peer_blas = "unknown";
  if (!a.no_peer) {
    const std::vector<std::string> envs =
        dev.is_cuda() ? std::vector<std::string>{""} : std::vector<std::string>{"", "OPENBLAS_NUM_THREADS=1 "};
    const std::vector<std::string> formats =
        dev.is_cuda() ? std::vector<std::string>{"contiguous"} : std::vector<std::string>{"contiguous", "channels_last"};
    for (const std::string& format : formats)
    for (const std::string& env : envs) {
      const std::string args = " --steps " + std::to_string(steps) + " --warmup " + std::to_string(warmup) +
                               " --batch-size " + std::to_string(batch) + " --threads " + std::to_string(threads) +
                               " --device " + a.device_name + " --amp " + amp_mode +
                               (cudnn_benchmark ? " --cudnn-benchmark" : "") + " --memory-format " + format;
      bench::run_peer(a.python, "resnet_peer.py", args, [&](const char* line) {
        char version[128], blas[64];
        double rate = 0, secs = 0, f = 0, b = 0, o = 0;
        int peer_threads = 0;
        if (std::sscanf(line, "peer: %lf %lf %127s %d %lf %lf %lf", &rate, &secs, version, &peer_threads, &f, &b,
                        &o) == 7) {
          std::printf("torch  %s %s %s: %.1f images/s (%.2f ms/step; medians: forward %.2f, backward %.2f, "
                      "optimizer %.2f)\n",
                      version, format.c_str(), env.empty() ? "(default env)" : env.c_str(), rate,
                      1e3 * secs / double(steps), f, b, o);
          if (rate > peer_rate) peer_rate = rate, peer_version = version, peer_env = env, peer_format = format;
          return true;
        }
        double peak_mb = 0, start_mb = 0;
        if (std::sscanf(line, "peer_memory: %lf %lf", &peak_mb, &start_mb) == 2) {
          std::printf("torch  memory of one step: peak RSS %.1f MB (%.1f MB at its start)\n", peak_mb, start_mb);
          peer_peak_rss_mb = std::max(peer_peak_rss_mb, peak_mb);
          return true;
        }
        if (std::sscanf(line, "peer_blas: %63s", blas) == 1) peer_blas = blas;  // and echoed
        return false;
      }, env);
    }
    if (peer_rate <= 0) std::printf("torch  peer did not run (is torch importable by %s?)\n", a.python.c_str());
  }
  if (!peer_env.empty()) peer_env = " " + peer_env.substr(0, peer_env.size() - 1);
  std::printf("result: {\"bench\": \"resnet_train\", \"device\": \"%s\", \"dtype\": \"f32\", \"amp\": \"%s\", "
              "\"cudnn_benchmark\": %s, \"batch\": %lld, \"threads\": %d, \"ember_images_per_s\": %.1f, \"peer_images_per_s\": %.1f, \"ratio\": %.3f, "
              "\"ember_fwd_ms\": %.3f, \"ember_bwd_ms\": %.3f, \"ember_opt_ms\": %.3f, \"peer\": \"torch %s%s\", "
              "\"peer_blas\": \"%s\", \"ember_peak_rss_mb\": %.1f, \"ember_step_tensor_peak_mb\": %.1f, "
              "\"peer_peak_rss_mb\": %.1f, \"memory_format\": \"%s\", \"peer_memory_format\": \"%s\"}\n",
              a.device_name.c_str(), amp_mode.c_str(), cudnn_benchmark ? "true" : "false", (long long)batch, threads, ember_rate, peer_rate, peer_rate > 0 ? ember_rate / peer_rate : 0.0,
              median(fwd_ms), median(bwd_ms), median(opt_ms), peer_version.c_str(), peer_env.c_str(),
              peer_blas.c_str(), ember_peak_rss_mb, ember_tensor_peak_mb, peer_peak_rss_mb, memory_format.c_str(),
              peer_format.c_str());
  return 0;
}
