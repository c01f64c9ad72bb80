// bench_ddp: the cost of DistributedDataParallel per step, for the MNIST MLP (784-512-256-10,
// AdamW) on CPU ranks over MPI. Launches itself: the single-process run happens here, then
// `mpirun -np N bench_ddp --worker` runs the N-rank part (or run that command by hand).
//
//   build/bin/bench_ddp [--steps 50] [--batch-size 128] [--np 2] [--threads 1]
//
// Measured, per optimizer step of one global batch of B images:
//   single     one process, batch B, no DDP
//   local      each of N ranks, batch B/N, no communication (the compute DDP starts from)
//   ddp        each of N ranks, batch B/N, DDP (bucketed async all-reduce overlapping backward)
// Ratios in the result line: overhead = ddp / local (the price of communication: 1.0 would be
// free), speedup = single / ddp (what N ranks buy on this machine). The peer is the same step
// without DDP, in the same run. On a machine with fewer cores than N x threads, the ranks
// compete for cores and speedup says little; overhead is the number to watch.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <ember/ember.h>
#include "../examples/common/cli_checks.h"

using namespace ember;

namespace {

struct Mlp : nn::Module {
  nn::Linear fc1{784, 512}, fc2{512, 256}, fc3{256, 10};
  Mlp() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
    register_module("fc3", fc3);
  }
  Tensor forward(const Tensor& x) { return fc3(relu(fc2(relu(fc1(x))))); }
};

// Milliseconds per step over `steps` steps after `warmup` (the data is one fixed batch: the
// input pipeline is not what is measured).
double time_steps(Mlp& net, distributed::DistributedDataParallel* ddp, int64_t batch, int steps,
                  int warmup) {
  manual_seed(1);
  Tensor x = randn({batch, 784}), y = randint(0, 10, {batch});
  optim::AdamW opt(net.parameters(), {.lr = 1e-3});
  auto step = [&] {
    Tensor logits = ddp ? ddp->forward([&] { return net.forward(x); }) : net.forward(x);
    Tensor loss = cross_entropy(logits, y);
    opt.zero_grad();
    loss.backward();
    opt.step();
  };
  for (int i = 0; i < warmup; ++i) step();
  if (ddp) ddp->process_group().barrier();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) step();
  if (ddp) ddp->process_group().barrier();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / steps;
}

int worker(int64_t global_batch, int steps, int warmup) {
  distributed::init();
  return distributed::abort_on_error([&] {
    const int world = distributed::world_size();
    const int64_t batch = global_batch / world;
    Mlp net;
    distributed::DistributedDataParallel ddp(net);
    // Alternating rounds, best of each: other load on the machine hits both sides alike.
    double local = 1e30, ddp_ms = 1e30;
    for (int round = 0; round < 3; ++round) {
      distributed::default_group()->barrier();
      local = std::min(local, time_steps(net, nullptr, batch, steps, warmup));
      distributed::default_group()->barrier();
      ddp_ms = std::min(ddp_ms, time_steps(net, &ddp, batch, steps, warmup));
    }
    if (distributed::rank() == 0)
      std::printf("worker: ranks %d local_ms %.6f ddp_ms %.6f\n", world, local, ddp_ms);
    distributed::finalize();
    return 0;
  });
}

}  // namespace

int main(int argc, char** argv) {
  int64_t batch = 128;
  int steps = 50, warmup = 5, np = 2, threads = 1;
  bool is_worker = false;
  CLI::App app{"bench_ddp: DistributedDataParallel overhead per step (MNIST MLP, CPU ranks)"};
  app.add_option("--batch-size", batch, "global batch (split over the ranks)")->check(ember::examples::PositiveNumber);
  app.add_option("--steps", steps, "timed steps")->check(ember::examples::PositiveNumber);
  app.add_option("--warmup", warmup, "untimed steps first")->check(ember::examples::NonNegativeNumber);
  app.add_option("--np", np, "ranks of the DDP run")->check(CLI::Range(2, 64));
  app.add_option("--threads", threads, "CPU threads per process")->check(ember::examples::PositiveNumber);
  app.add_flag("--worker", is_worker, "the N-rank part (run under mpirun)");
  CLI11_PARSE(app, argc, argv);
  omp_set_num_threads(threads);
  if (is_worker) return worker(batch, steps, warmup);

  Mlp net;
  double single = 1e30;
  for (int round = 0; round < 3; ++round) single = std::min(single, time_steps(net, nullptr, batch, steps, warmup));
  std::printf("single process, batch %lld, %d thread(s): %.3f ms/step\n", (long long)batch, threads, single);

  double local = 0, ddp = 0;
  int ranks = 0;
#ifdef EMBER_MPIEXEC
  const std::string cmd = std::string(EMBER_MPIEXEC) + " -np " + std::to_string(np) + " " +
                          EMBER_MPIEXEC_FLAGS + " -x OMP_NUM_THREADS=" + std::to_string(threads) +
                          " /proc/" + std::to_string(getpid()) + "/exe --worker --batch-size " +
                          std::to_string(batch) + " --steps " + std::to_string(steps) + " --warmup " +
                          std::to_string(warmup) + " --threads " + std::to_string(threads) + " 2>&1";
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char line[512];
    while (std::fgets(line, sizeof line, p)) {
      if (std::sscanf(line, "worker: ranks %d local_ms %lf ddp_ms %lf", &ranks, &local, &ddp) != 3)
        std::fputs(line, stdout);
    }
    if (pclose(p) != 0) ranks = 0;
  }
#endif
  if (ranks == 0) {
    std::printf("the %d-rank run failed or this build has no MPI: run `mpirun -np %d %s --worker` by hand\n",
                np, np, argv[0]);
    std::printf("result: {\"bench\": \"ddp\", \"model\": \"mlp\", \"ranks\": %d, \"ok\": false}\n", np);
    return 1;
  }
  std::printf("%d ranks, batch %lld each: %.3f ms/step without communication, %.3f ms/step with DDP\n",
              ranks, (long long)(batch / ranks), local, ddp);
  std::printf("result: {\"bench\": \"ddp\", \"model\": \"mlp\", \"device\": \"cpu\", \"ranks\": %d, "
              "\"global_batch\": %lld, \"threads_per_rank\": %d, \"overhead\": %.4f, \"speedup\": %.4f, "
              "\"ok\": true}\n",
              ranks, (long long)batch, threads, ddp / local, single / ddp);
  return 0;
}
