// bench_rnn: nn::LSTM forward and forward+backward ([T=64, N=32, I=128, H=256], 1 and 2
// layers) and one training step of examples/char_lstm.cpp's model (Embedding(256, 64) ->
// LSTM(64, 256, 2 layers) -> Linear(256, 256), cross-entropy, clip_grad_norm_, AdamW; batch
// 32 x 64 bytes), against PyTorch on the CPU in the same run (bench/peers/rnn_peer.py, same
// thread count, same timing: the median of --steps calls after --warmup).
//
//   build/bin/bench_rnn [--steps 10] [--warmup 2] [--threads N] [--python PY] [--no-peer]
//                       [--profile]
//
// --profile prints ember's profiler table (key averages) of the 2-layer forward+backward.
// Ends with one `result: {json}` line: per case the ember and peer medians (ms) and
// "ratios" {case: peer time / ember time} (> 1: ember faster).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <ember/ember.h>

#include "bench_harness.h"
#include "../examples/common/cli_checks.h"

using namespace ember;

namespace {

int g_steps = 10, g_warmup = 2;

double median_ms(const std::function<void()>& fn) {
  for (int i = 0; i < g_warmup; ++i) fn();
  std::vector<double> ts;
  for (int i = 0; i < g_steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    ts.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ts.begin(), ts.end());
  return ts[ts.size() / 2];
}

struct CharLstm : nn::Module {
  nn::Embedding emb{256, 64};
  nn::LSTM lstm{64, 256, {.num_layers = 2, .batch_first = true}};
  nn::Linear head{256, 256};
  CharLstm() {
    register_module("emb", emb);
    register_module("lstm", lstm);
    register_module("head", head);
  }
};

}  // namespace

int main(int argc, char** argv) {
  std::string python = bench::default_python();
  int threads = 0;
  bool no_peer = false, profile = false;
  CLI::App app{"bench_rnn: LSTM forward/backward and a char-LSTM training step vs PyTorch (CPU)"};
  app.add_option("--steps", g_steps, "timed calls per case (median)")->check(ember::examples::PositiveNumber);
  app.add_option("--warmup", g_warmup, "untimed calls first")->check(ember::examples::NonNegativeNumber);
  app.add_option("--threads", threads, "threads for both sides (0: OpenMP's default)");
  app.add_option("--python", python, "the Python whose torch is the peer");
  app.add_flag("--no-peer", no_peer);
  app.add_flag("--profile", profile, "print ember's profiler table of the 2-layer forward+backward");
  CLI11_PARSE(app, argc, argv);
  if (threads > 0) omp_set_num_threads(threads);
  threads = omp_get_max_threads();
  manual_seed(0);

  std::map<std::string, double> ember_ms, peer_ms;
  const int64_t T = 64, N = 32, I = 128, H = 256;
  for (int64_t layers : {1, 2}) {
    nn::LSTM lstm(I, H, {.num_layers = layers});
    Tensor x = randn({T, N, I}).requires_grad_(true), g = randn({T, N, H});
    auto fwd_bwd = [&] {
      lstm.zero_grad();
      x.set_grad(Tensor());
      auto [out, st] = lstm(x);
      (out * g).sum().backward();
    };
    ember_ms[str("lstm", layers, "_fwd")] = median_ms([&] {
      NoGradGuard ng;
      lstm(x);
    });
    ember_ms[str("lstm", layers, "_fwd_bwd")] = median_ms(fwd_bwd);
    if (profile && layers == 2) {
      profiler::Profiler prof;
      prof.start();
      for (int i = 0; i < 3; ++i) fwd_bwd();
      prof.stop();
      std::cout << prof.key_averages().table("self_cpu_time_total", 15) << std::flush;
    }
  }
  {
    CharLstm model;
    optim::AdamW opt(model.parameters(), {.lr = 2e-3, .weight_decay = 0.01});
    Tensor xb = randint(0, 256, {32, 65});
    std::optional<std::tuple<Tensor, Tensor>> state;
    ember_ms["char_lstm_step"] = median_ms([&] {
      auto [out, st] = model.lstm(model.emb(xb.narrow(1, 0, 64)), state);
      state = std::tuple{std::get<0>(st).detach(), std::get<1>(st).detach()};
      Tensor loss = nn::functional::cross_entropy(model.head(out).reshape({-1, 256}),
                                                  xb.narrow(1, 1, 64).reshape({-1}));
      opt.zero_grad();
      loss.backward();
      optim::clip_grad_norm_(model.parameters(), 1.0);
      opt.step();
    });
  }

  std::string peer_version = "none";
  if (!no_peer) {
    const std::string args = " --steps " + std::to_string(g_steps) + " --warmup " + std::to_string(g_warmup) +
                             " --threads " + std::to_string(threads);
    bench::run_peer(python, "rnn_peer.py", args, [&](const char* line) {
      char name[128], version[64];
      double ms;
      if (std::sscanf(line, "peer: %127s %lf %63s", name, &ms, version) != 3) return false;
      peer_ms[name] = ms;
      peer_version = version;
      return true;
    }, "", stderr);
  }

  std::string cases, ratios;
  for (const auto& [name, ms] : ember_ms) {
    const auto it = peer_ms.find(name);
    std::printf("%-16s ember %9.3f ms", name.c_str(), ms);
    if (it != peer_ms.end()) std::printf("   torch %9.3f ms   ratio %.2f", it->second, it->second / ms);
    std::printf("\n");
    cases += str(cases.empty() ? "" : ", ", "\"", name, "\": {\"ember_ms\": ", ms);
    if (it != peer_ms.end()) {
      cases += str(", \"peer_ms\": ", it->second);
      ratios += str(ratios.empty() ? "" : ", ", "\"", name, "\": ", it->second / ms);
    }
    cases += "}";
  }
  std::printf("result: {\"bench\": \"rnn\", \"device\": \"cpu\", \"threads\": %d, \"peer\": \"torch %s\", "
              "\"cases\": {%s}, \"ratios\": {%s}}\n",
              threads, peer_version.c_str(), cases.c_str(), ratios.c_str());
  return 0;
}
