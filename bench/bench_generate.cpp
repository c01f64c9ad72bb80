// bench_generate: KV-cache generation throughput (new tokens/s) of nn::GPT::generate against
// PyTorch's eager generation loop with a KV cache (bench/peers/generate_peer.py), same run,
// same model shape, same thread count.
//
//   build/bin/bench_generate [--device cpu|cuda] [--prompt-len 32] [--new-tokens 64]
//                            [--batch 1,8] [--steps 3] [--warmup 1] [--threads N]
//                            [--python PY] [--no-peer] [--profile]
//
// The model is GPT-2 124M (nn::GPTConfig::preset("gpt2-small"): 12 x 768, vocabulary 50257
// padded to 50304, tied head), random GPT-2 init, f32, eval, no grad. One call generates
// --new-tokens greedy tokens after a random --prompt-len prompt for every row of a batch:
// one prefill forward of the prompt, then one forward per new token through the cache
// (the last new token needs none), the last position's logits over the real vocabulary read
// on the host each step (ember samples there; the peer reads its chosen tokens there, as
// transformers' generate does for its stopping check). Rate = rows * new tokens / seconds of
// the whole call (prefill included), the median of --steps calls after --warmup.
// On a CPU the peer runs twice on the same --threads cores: torch's threads with
// OPENBLAS_NUM_THREADS=1, and one torch thread with OPENBLAS_NUM_THREADS=--threads; per row the
// faster counts (on OpenBLAS the second: both threaded, they oversubscribe the cores).
// Ends with one `result: {json}` line; ratio = ember / peer (> 1: faster).
#include <omp.h>

#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <ember/ember.h>

#include "bench_harness.h"
#include "../examples/common/cli_checks.h"

using namespace ember;

int main(int argc, char** argv) {
  bench::PeerArgs a;
  a.steps = 3;
  a.warmup = 1;
  int64_t prompt_len = 32, new_tokens = 64;
  std::vector<int64_t> batches = {1, 8};
  bool profile = false;
  CLI::App app{"GPT-2 124M KV-cache generation: ember vs PyTorch"};
  app.add_option("--prompt-len", prompt_len)->check(ember::examples::PositiveNumber);
  app.add_option("--new-tokens", new_tokens)->check(ember::examples::PositiveNumber);
  app.add_option("--batch", batches, "rows per call, one result row each (comma-separated)")
      ->delimiter(',')
      ->check(ember::examples::PositiveNumber);
  app.add_flag("--profile", profile, "after timing, profile one more call per batch and print the table");
  if (const int rc = bench::parse_peer_bench_args(app, a, argc, argv); rc >= 0) return rc;
  const Device dev = a.device();

  nn::GPTConfig cfg = nn::GPTConfig::preset("gpt2-small");
  cfg.dropout = 0;
  if (prompt_len + new_tokens > cfg.block_size) {
    std::fprintf(stderr, "bench_generate: --prompt-len + --new-tokens must fit block_size %lld\n",
                 (long long)cfg.block_size);
    return 2;
  }
  manual_seed(0);
  nn::GPT model(cfg);
  model.to(dev);
  model.eval();
  std::printf("model  gpt2-small, %lld parameters, f32, %s, %d threads; prompt %lld, %lld new tokens, greedy\n",
              (long long)model.num_parameters(), a.device_name.c_str(), a.threads, (long long)prompt_len,
              (long long)new_tokens);

  std::vector<double> ember_rate(batches.size(), 0), peer_rate(batches.size(), 0);
  Generator data_gen(1);
  for (size_t i = 0; i < batches.size(); ++i) {
    const int64_t B = batches[i];
    const std::vector<int64_t> flat = randint(0, cfg.vocab_size, {B, prompt_len}, DType::i64, &data_gen).to_vector<int64_t>();
    std::vector<std::vector<int64_t>> prompts;
    for (int64_t b = 0; b < B; ++b) prompts.emplace_back(flat.begin() + b * prompt_len, flat.begin() + (b + 1) * prompt_len);
    const nn::GenerationConfig gc{.max_new_tokens = new_tokens, .temperature = 0};
    size_t made = 0;
    const double s = bench::time_calls([&] {
      const auto out = model.generate(prompts, gc);
      made = 0;
      for (const auto& row : out) made += row.size() - size_t(prompt_len);
    }, dev, a.steps, a.warmup);
    if (made != size_t(B * new_tokens)) {
      std::fprintf(stderr, "bench_generate: generated %zu tokens, expected %lld\n", made, (long long)(B * new_tokens));
      return 1;
    }
    ember_rate[i] = double(B * new_tokens) / s;
    std::printf("ember  B=%-3lld %9.1f tokens/s  (%.1f ms per call, %.2f ms per step)\n", (long long)B, ember_rate[i],
                1e3 * s, 1e3 * s / double(new_tokens));
    if (profile) {  // ops by self time, grouped by input shapes
      profiler::Profiler prof({.record_shapes = true});
      prof.start();
      (void)model.generate(prompts, gc);
      if (dev.is_cuda()) cuda::synchronize();
      prof.stop();
      std::printf("%s", prof.key_averages(true).table("self_cpu_time_total", 25).c_str());
    }
    std::fflush(stdout);
  }

  std::string peer_version = "none", peer_blas = "unknown";
  std::vector<std::string> peer_setup(batches.size());  // how each row's faster peer run was set up
  if (!a.no_peer) {
    std::string batch_list;
    for (size_t i = 0; i < batches.size(); ++i) batch_list += (i ? "," : "") + std::to_string(batches[i]);
    // The same cores, split two ways on a CPU: torch's threads with a single-threaded BLAS, or
    // one torch thread with the BLAS threaded (what a GEMV-bound loop on OpenBLAS wants: torch's
    // threads and OpenBLAS's oversubscribe the cores when both are threaded). An MKL torch
    // ignores the variable, so the first setup is its usual one.
    struct Setup {
      std::string env;
      int torch_threads;
    };
    std::vector<Setup> setups = {{"", a.threads}};
    if (!dev.is_cuda()) {
      setups = {{"OPENBLAS_NUM_THREADS=1", a.threads}};
      if (a.threads > 1) setups.push_back({"OPENBLAS_NUM_THREADS=" + std::to_string(a.threads), 1});
    }
    for (const Setup& su : setups) {
      bench::PeerArgs pa = a;
      pa.threads = su.torch_threads;
      const std::string args = bench::peer_common_args(pa) + " --prompt-len " + std::to_string(prompt_len) +
                               " --new-tokens " + std::to_string(new_tokens) + " --batch " + batch_list;
      const std::string label = su.env.empty() ? "" : su.env + ", torch threads " + std::to_string(su.torch_threads);
      bench::run_peer(a.python, "generate_peer.py", args, [&](const char* line) {
        long long B = 0;
        double rate = 0, ms = 0;
        char version[128], blas[64];
        if (std::sscanf(line, "peer_blas: %63s", blas) == 1) {
          peer_blas = blas;
          return true;
        }
        if (std::sscanf(line, "peer: %lld %lf %lf %127s", &B, &rate, &ms, version) != 4) return false;
        peer_version = version;
        std::printf("torch  B=%-3lld %9.1f tokens/s  (%.1f ms per call)%s%s\n", B, rate, ms, label.empty() ? "" : "  ",
                    label.c_str());
        for (size_t i = 0; i < batches.size(); ++i)
          if (batches[i] == B && rate > peer_rate[i]) {
            peer_rate[i] = rate;
            peer_setup[i] = label;
          }
        return true;
      }, su.env.empty() ? "" : su.env + " ");
    }
    bench::say_peer_missing(peer_version, a.python);
  }

  std::string rows, ratios;
  for (size_t i = 0; i < batches.size(); ++i) {
    const double r = peer_rate[i] > 0 ? ember_rate[i] / peer_rate[i] : 0.0;
    std::printf("ratio  B=%-3lld %.3f (ember/peer tokens/s)\n", (long long)batches[i], r);
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  "%s{\"batch\": %lld, \"ember_tokens_per_s\": %.2f, \"peer_tokens_per_s\": %.2f, \"ratio\": %.3f, "
                  "\"peer_setup\": \"%s\"}",
                  i ? ", " : "", (long long)batches[i], ember_rate[i], peer_rate[i], r, peer_setup[i].c_str());
    rows += buf;
    std::snprintf(buf, sizeof buf, "%s\"b%lld\": %.3f", i ? ", " : "", (long long)batches[i], r);
    ratios += buf;
  }
  std::printf("result: {\"bench\": \"generate\", \"model\": \"gpt2-small\", \"device\": \"%s\", \"dtype\": \"f32\", "
              "\"threads\": %d, \"prompt_len\": %lld, \"new_tokens\": %lld, \"peer\": \"torch %s\", "
              "\"peer_blas\": \"%s\", \"ratios\": {%s}, \"rows\": [%s]}\n",
              a.device_name.c_str(), a.threads, (long long)prompt_len, (long long)new_tokens, peer_version.c_str(),
              peer_blas.c_str(), ratios.c_str(), rows.c_str());
  return 0;
}
