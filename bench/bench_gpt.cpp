// bench_gpt: GPT-2 training-step throughput (tokens/s) of ember's nn::GPT against the same
// model in PyTorch (bench/peers/torch_gpt.py, nanoGPT's model), same run, same recipe.
//
//   build/bin/bench_gpt [--preset tiny|gpt2-small] [--n-layer L --n-head H --n-embd C --vocab V]
//                       [-B 8] [-T 64] [--steps 20] [--warmup 3] [--device cpu|cuda]
//                       [--amp off|bf16|fp16] [--compile] [--threads N] [--python PY] [--no-peer]
//                       [--profile N] [--cuda-graph]
//
// One step, on both sides, is examples/gpt.cpp's: zero_grad, forward + loss under autocast
// (--amp), backward (through a GradScaler for fp16), unscale, clip_grad_norm_(1.0), AdamW
// (betas 0.9/0.95, weight decay 0.1 on matrices and embeddings in one group, none on biases
// and LayerNorm in the other; torch's is fused on CUDA when it has it). Tokens are random in
// [0, vocab); the model's explicit sizes override the preset's; the vocabulary is padded to a
// multiple of 64 (gpt2's 50257 -> 50304) with the lm_head tied to wte.
//
// Steps are timed one by one (each ends by reading the loss: the only host wait of the step)
// and the rate is B*T over the median step, so a noisy neighbour that slows a few steps does
// not move it. On CUDA also: peak memory (cuda::max_memory_allocated against
// torch.cuda.max_memory_allocated, both over the whole run) and MFU (nanoGPT's 6N + 12LCT
// FLOPs per token) twice: over the card's datasheet dense bf16 peak, and over the bf16 GEMM
// rate measured in this run (an 8192^3 matmul: the ceiling a training step can approach).
// --cuda-graph (CUDA): ember's whole step (zero_grad, forward, backward, clip, a capturable
// AdamW) is captured once after the warm-up steps and replayed (cuda::GraphedStep). --compile asks the peer for torch.compile
// (PyTorch >= 2; reported as not compiled where missing). The peer runs under --python
// (default $EMBER_PYTHON, else /usr/bin/python3, Debian's python3-torch); on a CPU it runs
// twice, with and without OPENBLAS_NUM_THREADS=1 (see bench_mnist), the faster counts.
//
// Ends with one `result: {json}` line, ratio = ember / peer tokens/s (> 1: ember faster).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <ember/amp.h>
#include <ember/ember.h>

#include "gpu_timing.h"
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
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Dense bf16 tensor-core FLOP/s of the card (as examples/gpt.cpp): sm_80 2048 and sm_90 4096
// FLOP per SM per clock; 0 when unknown or on a CPU (no MFU then).
double peak_bf16_flops(Device dev) {
  if (!dev.is_cuda()) return 0;
  const cuda::DeviceProperties p = cuda::get_device_properties(dev.index);
  const double per_sm_clock = p.major == 9 ? 4096 : p.major == 8 && p.minor == 0 ? 2048 : 0;
  return per_sm_clock * p.multiprocessor_count * p.clock_rate_khz * 1e3;
}

struct PeerResult {
  double tokens_per_s = 0, ms = 0;
  long long peak_bytes = 0;
  int compiled = 0, sdpa = 0, fused = 0, threads = 0;
  std::string version = "none", env;
};
// The BLAS under the CPU peer's torch (bench/peers/peer_blas.py): "reference" means netlib's
// unoptimized one, against which a ratio says nothing.
std::string peer_blas = "unknown";

}  // namespace

int main(int argc, char** argv) {
  std::string preset = "tiny", device_name = "cpu", amp_mode = "off";
  const char* env_python = std::getenv("EMBER_PYTHON");
  std::string python = env_python && *env_python ? env_python : "/usr/bin/python3";
  int64_t n_layer = 0, n_head = 0, n_embd = 0, vocab = 0, B = 8, T = 64, steps = 20, warmup = 3;
  double lr = 6e-4;
  int threads = omp_get_max_threads();
  bool no_peer = false, compile = false, cuda_graph = false;
  int profile_steps = 0;
  CLI::App app{"GPT training-step throughput: ember vs PyTorch"};
  app.add_option("--preset", preset)->check(CLI::IsMember({"tiny", "gpt2-small", "gpt2"}));
  app.add_option("--n-layer", n_layer, "override the preset")->check(ember::examples::PositiveNumber);
  app.add_option("--n-head", n_head, "override the preset")->check(ember::examples::PositiveNumber);
  app.add_option("--n-embd", n_embd, "override the preset")->check(ember::examples::PositiveNumber);
  app.add_option("--vocab", vocab, "override the preset's vocabulary (padded to a multiple of 64)")
      ->check(ember::examples::PositiveNumber);
  app.add_option("-B,--batch-size", B)->check(ember::examples::PositiveNumber);
  app.add_option("-T,--seq-len", T)->check(ember::examples::PositiveNumber);
  app.add_option("--steps", steps, "timed steps")->check(ember::examples::PositiveNumber);
  app.add_option("--warmup", warmup)->check(ember::examples::NonNegativeNumber);
  app.add_option("--lr", lr)->check(ember::examples::PositiveNumber);
  app.add_option("--device", device_name)->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--amp", amp_mode, "off, bf16 (autocast), fp16 (autocast + GradScaler)")
      ->check(CLI::IsMember({"off", "bf16", "fp16"}));
  app.add_flag("--compile", compile, "the peer runs torch.compile'd (PyTorch >= 2)");
  app.add_option("--threads", threads, "CPU threads for both sides")->check(ember::examples::PositiveNumber);
  app.add_option("--python", python, "the Python whose torch is the peer");
  app.add_flag("--no-peer", no_peer);
  app.add_option("--profile", profile_steps, "after timing, profile this many ember steps and print the table")
      ->check(ember::examples::NonNegativeNumber);
  app.add_flag("--cuda-graph", cuda_graph, "ember's step captured in a CUDA graph and replayed (CUDA, bf16/off)");
  CLI11_PARSE(app, argc, argv);
  omp_set_num_threads(threads);
  const Device dev = device_name == "cuda" ? Device::cuda(0) : Device::cpu();
  if (cuda_graph && (!dev.is_cuda() || amp_mode == "fp16")) {
    std::fprintf(stderr, "bench_gpt: --cuda-graph needs --device cuda and --amp off or bf16\n");
    return 2;
  }

  nn::GPTConfig cfg = nn::GPTConfig::preset(preset);
  if (n_layer) cfg.n_layer = n_layer;
  if (n_head) cfg.n_head = n_head;
  if (n_embd) cfg.n_embd = n_embd;
  if (vocab) cfg.vocab_size = vocab, cfg.padded_vocab_size = (vocab + 63) / 64 * 64;
  cfg.block_size = std::max(cfg.block_size, T);
  cfg.dropout = 0;

  manual_seed(0);
  nn::GPT model(cfg);
  model.to(dev);
  model.train();
  optim::AdamW opt(model.configure_optimizer_groups<optim::AdamWOptions>(
      0.1, {.lr = lr, .betas = {0.9, 0.95}, .eps = 1e-8, .capturable = cuda_graph}));
  const bool use_amp = amp_mode != "off";
  const DType amp_dtype = amp_mode == "fp16" ? DType::f16 : DType::bf16;
  amp::GradScaler scaler({.enabled = amp_mode == "fp16"});
  const std::vector<Tensor> params = model.parameters();

  std::vector<std::pair<Tensor, Tensor>> batches;  // a few fixed random batches, cycled
  for (int i = 0; i < 4; ++i)
    batches.emplace_back(randint(0, cfg.vocab_size, {B, T}, TensorOptions(DType::i64)).to(dev),
                         randint(0, cfg.vocab_size, {B, T}, TensorOptions(DType::i64)).to(dev));

  std::vector<double> step_ms, fwd_ms, bwd_ms, opt_ms;
  double first_loss = NAN, last_loss = NAN;
  // The step's phases, timed on the host (meaningful on a CPU only: CUDA work is queued).
  Clock::time_point t1, t2;
  auto train_step = [&](const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss;
    {
      amp::autocast ac(dev, amp_dtype, use_amp);
      loss = model.forward(x, y);
    }
    t1 = Clock::now();
    scaler.scale(loss).backward();
    t2 = Clock::now();
    scaler.unscale_(opt);
    optim::clip_grad_norm_(params, 1.0);
    scaler.step(opt);
    scaler.update();
    return loss;
  };
  Tensor x_static, y_static;
  std::optional<cuda::GraphedStep> graphed;
  if (cuda_graph) {
    x_static = zeros({B, T}, TensorOptions(DType::i64).device(dev));
    y_static = zeros({B, T}, TensorOptions(DType::i64).device(dev));
    graphed.emplace([&] { return train_step(x_static, y_static); },
                    cuda::GraphedStepOptions{.parameters = params});
  }
  auto step = [&](int64_t i, bool timed) {
    const auto& [x, y] = batches[size_t(i) % batches.size()];
    const auto t0 = Clock::now();
    Tensor loss;
    if (graphed) {
      x_static.copy_(x);
      y_static.copy_(y);
      loss = (*graphed)()[0];
    } else {
      loss = train_step(x, y);
    }
    const double l = loss.item<double>();
    const auto t3 = Clock::now();
    if (std::isnan(first_loss)) first_loss = l;
    last_loss = l;
    if (timed) {
      step_ms.push_back(ms_between(t0, t3));
      fwd_ms.push_back(ms_between(t0, t1));
      bwd_ms.push_back(ms_between(t1, t2));
      opt_ms.push_back(ms_between(t2, t3));
    }
  };
  for (int64_t i = 0; i < warmup; ++i) step(i, false);
  if (dev.is_cuda()) cuda::synchronize();
  for (int64_t i = 0; i < steps; ++i) step(warmup + i, true);
  if (dev.is_cuda()) cuda::synchronize();
  const double ember_ms = median(step_ms);
  const double ember_rate = double(B * T) / (ember_ms / 1e3);
  const long long ember_peak = dev.is_cuda() ? (long long)cuda::max_memory_allocated(dev.index) : 0;
  const double flops_token =
      6.0 * double(model.num_parameters()) + 12.0 * double(cfg.n_layer * cfg.n_embd * T);
  const double peak_flops = peak_bf16_flops(dev);
  auto mfu = [&](double rate) { return peak_flops > 0 ? flops_token * rate / peak_flops : 0.0; };
  // The bf16 GEMM ceiling of this card, measured: what a step made of GEMMs could reach.
  double gemm_flops = 0;
  if (dev.is_cuda()) {
    const int64_t n = 8192;
    const TensorOptions o = TensorOptions(DType::bf16).device(dev);
    Tensor a = randn({n, n}, o), b = randn({n, n}, o);
    gemm_flops = 2.0 * double(n) * double(n) * double(n) / bench::time_gpu([&] { (void)matmul(a, b); }, 5);
  }
  auto mfu_measured = [&](double rate) { return gemm_flops > 0 ? flops_token * rate / gemm_flops : 0.0; };

  std::printf("model  %lld layers, %lld heads, %lld wide, vocab %lld (padded %lld), %lld parameters; "
              "batch %lld x %lld on %s, amp %s, %d threads\n",
              (long long)cfg.n_layer, (long long)cfg.n_head, (long long)cfg.n_embd, (long long)cfg.vocab_size,
              (long long)cfg.padded_vocab_size, (long long)model.num_parameters(), (long long)B, (long long)T,
              device_name.c_str(), amp_mode.c_str(), threads);
  std::printf("ember  %.1f tokens/s (median step %.2f ms", ember_rate, ember_ms);
  if (!dev.is_cuda())  // on CUDA the phases are asynchronous: only the step total means anything
    std::printf(": forward %.2f, backward %.2f, clip+optimizer %.2f", median(fwd_ms), median(bwd_ms),
                median(opt_ms));
  std::printf("), loss %.4f -> %.4f", first_loss, last_loss);
  if (dev.is_cuda())
    std::printf(", peak memory %.1f MiB, MFU %.1f%% of the datasheet, %.1f%% of the measured %.0f TFLOP/s GEMM%s",
                double(ember_peak) / 1048576.0, 100 * mfu(ember_rate), 100 * mfu_measured(ember_rate),
                gemm_flops / 1e12, cuda_graph ? ", CUDA graph" : "");
  std::printf("\n");
  if (profile_steps > 0) {  // ops by self time, grouped by input shapes
    profiler::Profiler prof({.record_shapes = true});
    prof.start();
    for (int64_t i = 0; i < profile_steps; ++i) step(warmup + steps + i, false);
    if (dev.is_cuda()) cuda::synchronize();
    prof.stop();
    // On CUDA the launches are asynchronous: the ops' own CUDA events say where the step's time goes.
    const char* sort_by = dev.is_cuda() ? "self_cuda_time_total" : "self_cpu_time_total";
    std::printf("%s", prof.key_averages(true).table(sort_by, 25).c_str());
  }
  std::fflush(stdout);

  PeerResult peer;
  if (!no_peer) {
    const std::string script = std::string(EMBER_SOURCE_DIR) + "/bench/peers/torch_gpt.py";
    std::vector<std::string> envs = {""};
    if (!dev.is_cuda()) envs.push_back("OPENBLAS_NUM_THREADS=1 ");
    for (const std::string& env : envs) {
      const std::string cmd =
          env + python + " " + script + " --n-layer " + std::to_string(cfg.n_layer) + " --n-head " +
          std::to_string(cfg.n_head) + " --n-embd " + std::to_string(cfg.n_embd) + " --block-size " +
          std::to_string(cfg.block_size) + " --vocab " + std::to_string(cfg.vocab_size) + " --padded-vocab " +
          std::to_string(cfg.padded_vocab_size) + " --batch-size " + std::to_string(B) + " --seq-len " +
          std::to_string(T) + " --steps " + std::to_string(steps) + " --warmup " + std::to_string(warmup) +
          " --lr " + std::to_string(lr) + " --threads " + std::to_string(threads) + " --device " + device_name +
          " --amp " + amp_mode + (compile ? " --compile" : "") + " 2>&1";
      FILE* p = popen(cmd.c_str(), "r");
      if (!p) continue;
      char line[1024], version[128];
      while (std::fgets(line, sizeof line, p)) {
        PeerResult r;
        char blas[64];
        if (std::sscanf(line, "peer_blas: %63s", blas) == 1) {
          peer_blas = blas;
        } else if (std::sscanf(line, "peer: %lf %lf %127s %d %lld %d %d %d", &r.tokens_per_s, &r.ms, version, &r.threads,
                        &r.peak_bytes, &r.compiled, &r.sdpa, &r.fused) == 8) {
          r.version = version;
          r.env = env.empty() ? "" : env.substr(0, env.size() - 1);
          std::printf("torch  %s%s%s: %.1f tokens/s (median step %.2f ms)", version,
                      r.env.empty() ? "" : " ", r.env.c_str(), r.tokens_per_s, r.ms);
          if (dev.is_cuda())
            std::printf(", peak memory %.1f MiB, MFU %.1f%% of the datasheet, %.1f%% of the measured GEMM",
                        double(r.peak_bytes) / 1048576.0, 100 * mfu(r.tokens_per_s),
                        100 * mfu_measured(r.tokens_per_s));
          std::printf("%s%s%s\n", r.compiled ? ", compiled" : "", r.sdpa ? ", sdpa" : "",
                      r.fused ? ", fused AdamW" : "");
          if (r.tokens_per_s > peer.tokens_per_s) peer = r;
        } else {
          std::fputs(line, stdout);
        }
      }
      pclose(p);
    }
    if (peer.tokens_per_s <= 0) std::printf("torch  peer did not run (is torch importable by %s?)\n", python.c_str());
  }

  std::printf(
      "result: {\"bench\": \"gpt_train\", \"preset\": \"%s\", \"n_layer\": %lld, \"n_head\": %lld, "
      "\"n_embd\": %lld, \"vocab\": %lld, \"params\": %lld, \"device\": \"%s\", \"amp\": \"%s\", "
      "\"batch\": %lld, \"seq_len\": %lld, \"threads\": %d, \"compile\": %s, \"peer_compiled\": %s, "
      "\"cuda_graph\": %s, \"gemm_tflops\": %.1f, \"ember_mfu_measured\": %.4f, \"peer_mfu_measured\": %.4f, "
      "\"ember_tokens_per_s\": %.1f, \"peer_tokens_per_s\": %.1f, \"ratio\": %.3f, "
      "\"ember_ms_per_step\": %.3f, \"peer_ms_per_step\": %.3f, "
      "\"ember_peak_mib\": %.1f, \"peer_peak_mib\": %.1f, \"ember_mfu\": %.4f, \"peer_mfu\": %.4f, "
      "\"peer\": \"torch %s%s%s%s%s\", \"peer_blas\": \"%s\"}\n",
      preset.c_str(), (long long)cfg.n_layer, (long long)cfg.n_head, (long long)cfg.n_embd,
      (long long)cfg.vocab_size, (long long)model.num_parameters(), device_name.c_str(), amp_mode.c_str(),
      (long long)B, (long long)T, threads, compile ? "true" : "false", peer.compiled ? "true" : "false",
      cuda_graph ? "true" : "false", gemm_flops / 1e12, mfu_measured(ember_rate), mfu_measured(peer.tokens_per_s), ember_rate, peer.tokens_per_s,
      peer.tokens_per_s > 0 ? ember_rate / peer.tokens_per_s : 0.0, ember_ms, peer.ms,
      double(ember_peak) / 1048576.0, double(peer.peak_bytes) / 1048576.0, mfu(ember_rate),
      mfu(peer.tokens_per_s), peer.version.c_str(), peer.compiled ? " compiled" : "", peer.sdpa ? " sdpa" : "",
      peer.fused ? " fused-adamw" : "", peer.env.empty() ? "" : (" " + peer.env).c_str(), peer_blas.c_str());
  return 0;
}
