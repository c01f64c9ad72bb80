// bench_ddp: the cost per step and the memory per rank of data parallelism, for the MNIST MLP
// (784-512-256-10, AdamW) on CPU ranks over MPI: DDP, ZeRO-1 and FSDP (ZeRO-3). Launches
// itself: the single-process run happens here, then `mpirun -np N bench_ddp --worker` runs the
// N-rank part (or run that command by hand).
//
//   build/bin/bench_ddp [--steps 50] [--batch-size 128] [--np 2] [--threads 1]
//
// Measured, per optimizer step of one global batch of B images:
//   single     one process, batch B, no DDP
//   local      each of N ranks, batch B/N, no communication (the compute DDP starts from)
//   ddp        each of N ranks, batch B/N, DDP (bucketed async all-reduce overlapping backward)
//   zero1      each rank, batch B/N, plain backward + ZeroRedundancyOptimizer (reduce-scatter,
//              AdamW on the shard, all-gather)
//   fsdp       each rank, batch B/N, fully_shard per layer (gathers and reduce-scatters per unit)
//   tp         each rank, the whole batch B, the MLP split Megatron-style over the N ranks
//              (784-512 column-parallel, 512-256 row-parallel: one all-reduce each way)
// Ratios in the result line: overhead = ddp / local (the price of communication: 1.0 would be
// free), speedup = single / ddp (what N ranks buy on this machine), fsdp_overhead and
// zero1_overhead likewise, tp_speedup = single / tp. The peer is the same step without communication, in the same run.
// Memory per rank (rank 0), bytes: parameters, gradients, optimizer state, and the buffers
// communication adds (DDP's buckets, ZeRO's flat gradient, FSDP's gathered units at their
// peak); fsdp_memory_ratio = FSDP's total / DDP's. On a machine with fewer cores than N x
// threads the ranks compete for cores and speedup says little; the overheads are the numbers
// to watch.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
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

// Bytes of every tensor in an optimizer's state dict (its per-parameter state; the scalars are
// negligible).
int64_t state_dict_bytes(const StateDict& sd) {
  int64_t n = 0;
  for (const auto& [key, t] : sd) n += t.numel() * int64_t(t.element_size());
  return n;
}

int64_t tensor_bytes(const std::vector<Tensor>& ts, bool grads) {
  int64_t n = 0;
  for (const Tensor& t : ts) {
    const Tensor& x = grads ? t.grad() : t;
    if (x.defined()) n += x.numel() * int64_t(x.element_size());
  }
  return n;
}

struct Memory {
  int64_t params = 0, grads = 0, optimizer = 0, comm = 0;
  int64_t total() const { return params + grads + optimizer + comm; }
};

// The same MLP split over the ranks (tensor parallelism): the hidden 512 units by rows of fc1,
// fc2 by columns; fc3 whole.
struct TpMlp : nn::Module {
  std::shared_ptr<distributed::ColumnParallelLinear> fc1;
  std::shared_ptr<distributed::RowParallelLinear> fc2;
  nn::Linear fc3{256, 10};
  explicit TpMlp(const std::shared_ptr<distributed::ProcessGroup>& group)
      : fc1(register_module("fc1", std::make_shared<distributed::ColumnParallelLinear>(784, 512, group))),
        fc2(register_module("fc2", std::make_shared<distributed::RowParallelLinear>(512, 256, group))) {
    register_module("fc3", fc3);
  }
  Tensor forward(const Tensor& x) { return fc3(relu((*fc2)(relu((*fc1)(x))))); }
};

enum class Mode { local, ddp, zero1, fsdp, tp };

// Milliseconds per step() over `steps` calls after `warmup`, every rank starting and ending
// together.
template <class Step>
double ms_per_step(Step&& step, int steps, int warmup) {
  auto group = distributed::default_group();
  for (int i = 0; i < warmup; ++i) step();
  group->barrier();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) step();
  group->barrier();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / steps;
}

// Milliseconds per step over `steps` steps after `warmup` (the data is one fixed batch: the
// input pipeline is not what is measured); fills `mem` after the last step.
double time_steps(Mode mode, int64_t batch, int steps, int warmup, Memory* mem = nullptr) {
  manual_seed(1);
  Tensor x = randn({batch, 784}), y = randint(0, 10, {batch});
  if (mode == Mode::tp) {
    TpMlp net(distributed::default_group());
    optim::AdamW opt(net.parameters(), {.lr = 1e-3});
    auto step = [&] {
      Tensor loss = cross_entropy(net.forward(x), y);
      opt.zero_grad();
      loss.backward();
      opt.step();
    };
    const double ms = ms_per_step(step, steps, warmup);
    if (mem) {
      mem->params = tensor_bytes(net.parameters(), false);
      mem->grads = tensor_bytes(net.parameters(), true);
      mem->optimizer = state_dict_bytes(opt.state_dict());
    }
    return ms;
  }
  Mlp net;
  std::optional<distributed::DistributedDataParallel> ddp;
  std::optional<distributed::FSDPModule> fsdp;
  if (mode == Mode::ddp) ddp.emplace(net);
  if (mode == Mode::fsdp) {
    for (nn::Linear* l : {&net.fc1, &net.fc2, &net.fc3}) distributed::fully_shard(*l);
    fsdp = distributed::fully_shard(net);
  }
  std::optional<optim::AdamW> opt;
  std::optional<distributed::ZeroRedundancyOptimizer> zero;
  if (mode == Mode::zero1) zero.emplace(net.parameters(), optim::AdamWOptions{.lr = 1e-3});
  else opt.emplace(fsdp ? fsdp->parameters() : net.parameters(), optim::AdamWOptions{.lr = 1e-3});
  auto step = [&] {
    auto run = [&] { return net.forward(x); };
    Tensor logits = ddp ? ddp->forward(run) : fsdp ? fsdp->forward(run) : run();
    Tensor loss = cross_entropy(logits, y);
    if (zero) zero->zero_grad();
    else opt->zero_grad();
    loss.backward();
    if (zero) zero->step();
    else opt->step();
  };
  const double ms = ms_per_step(step, steps, warmup);
  if (mem) {
    const std::vector<Tensor> params = net.parameters();
    if (fsdp) {
      const distributed::FSDPMemory m = fsdp->memory();
      mem->params = m.sharded_parameters;
      mem->grads = m.sharded_gradients;
      mem->comm = m.gathered_peak;
      mem->optimizer = state_dict_bytes(opt->state_dict());
    } else {
      mem->params = tensor_bytes(params, false);
      mem->grads = tensor_bytes(params, true);
      if (zero) {
        mem->optimizer = zero->state_bytes();
        mem->comm = zero->numel() * 4;  // the flat gradient it reduce-scatters
      } else {
        mem->optimizer = state_dict_bytes(opt->state_dict());
        if (ddp) mem->comm = mem->params;  // the buckets hold a copy of every gradient
      }
    }
  }
  return ms;
}

void print_memory(const char* name, const Memory& m) {
  std::printf("worker: memory %s %lld %lld %lld %lld\n", name, (long long)m.params, (long long)m.grads,
              (long long)m.optimizer, (long long)m.comm);
}

int worker(int64_t global_batch, int steps, int warmup) {
  distributed::init();
  return distributed::abort_on_error([&] {
    const int world = distributed::world_size();
    const int64_t batch = global_batch / world;
    // Alternating rounds, best of each: other load on the machine hits all sides alike.
    double local = 1e30, ddp_ms = 1e30, zero_ms = 1e30, fsdp_ms = 1e30, tp_ms = 1e30;
    Memory ddp_mem, zero_mem, fsdp_mem, tp_mem;
    for (int round = 0; round < 3; ++round) {
      local = std::min(local, time_steps(Mode::local, batch, steps, warmup));
      ddp_ms = std::min(ddp_ms, time_steps(Mode::ddp, batch, steps, warmup, &ddp_mem));
      zero_ms = std::min(zero_ms, time_steps(Mode::zero1, batch, steps, warmup, &zero_mem));
      fsdp_ms = std::min(fsdp_ms, time_steps(Mode::fsdp, batch, steps, warmup, &fsdp_mem));
      tp_ms = std::min(tp_ms, time_steps(Mode::tp, global_batch, steps, warmup, &tp_mem));  // the whole batch
    }
    if (distributed::rank() == 0) {
      std::printf("worker: ranks %d local_ms %.6f ddp_ms %.6f zero1_ms %.6f fsdp_ms %.6f tp_ms %.6f\n", world, local,
                  ddp_ms, zero_ms, fsdp_ms, tp_ms);
      print_memory("ddp", ddp_mem);
      print_memory("zero1", zero_mem);
      print_memory("fsdp", fsdp_mem);
      print_memory("tp", tp_mem);
    }
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

  distributed::init();  // a world of one: the single-process steps go through the same code
  double single = 1e30;
  for (int round = 0; round < 3; ++round) single = std::min(single, time_steps(Mode::local, batch, steps, warmup));
  std::printf("single process, batch %lld, %d thread(s): %.3f ms/step\n", (long long)batch, threads, single);

  double local = 0, ddp = 0, zero1 = 0, fsdp = 0, tp = 0;
  int ranks = 0;
  std::map<std::string, Memory> mem;
#ifdef EMBER_MPIEXEC
  const std::string cmd = std::string(EMBER_MPIEXEC) + " -np " + std::to_string(np) + " " +
                          EMBER_MPIEXEC_FLAGS + " -x OMP_NUM_THREADS=" + std::to_string(threads) +
                          " /proc/" + std::to_string(getpid()) + "/exe --worker --batch-size " +
                          std::to_string(batch) + " --steps " + std::to_string(steps) + " --warmup " +
                          std::to_string(warmup) + " --threads " + std::to_string(threads) + " 2>&1";
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char line[512], name[32];
    long long a = 0, b = 0, c = 0, d = 0;
    while (std::fgets(line, sizeof line, p)) {
      if (std::sscanf(line, "worker: ranks %d local_ms %lf ddp_ms %lf zero1_ms %lf fsdp_ms %lf tp_ms %lf", &ranks,
                      &local, &ddp, &zero1, &fsdp, &tp) == 6)
        continue;
      if (std::sscanf(line, "worker: memory %31s %lld %lld %lld %lld", name, &a, &b, &c, &d) == 5) {
        mem[name] = Memory{a, b, c, d};
        continue;
      }
      std::fputs(line, stdout);
    }
    if (pclose(p) != 0) ranks = 0;
  }
#endif
  if (ranks == 0 || mem.size() != 4) {
    std::printf("the %d-rank run failed or this build has no MPI: run `mpirun -np %d %s --worker` by hand\n",
                np, np, argv[0]);
    std::printf("result: {\"bench\": \"ddp\", \"model\": \"mlp\", \"ranks\": %d, \"ok\": false}\n", np);
    return 1;
  }
  std::printf("%d ranks, batch %lld each, ms/step: %.3f without communication, DDP %.3f, ZeRO-1 %.3f, FSDP %.3f; "
              "tensor parallel on the whole batch %.3f\n",
              ranks, (long long)(batch / ranks), local, ddp, zero1, fsdp, tp);
  std::printf("memory per rank (KiB)   parameters  gradients  optimizer  comm buffers  total\n");
  for (const char* name : {"ddp", "zero1", "fsdp", "tp"}) {
    const Memory& m = mem[name];
    std::printf("  %-20s %11.1f %10.1f %10.1f %13.1f %6.1f\n", name, m.params / 1024.0, m.grads / 1024.0,
                m.optimizer / 1024.0, m.comm / 1024.0, m.total() / 1024.0);
  }
  std::printf("result: {\"bench\": \"ddp\", \"model\": \"mlp\", \"device\": \"cpu\", \"ranks\": %d, "
              "\"global_batch\": %lld, \"threads_per_rank\": %d, \"overhead\": %.4f, \"speedup\": %.4f, "
              "\"zero1_overhead\": %.4f, \"fsdp_overhead\": %.4f, \"ddp_bytes\": %lld, \"zero1_bytes\": %lld, "
              "\"fsdp_bytes\": %lld, \"fsdp_memory_ratio\": %.4f, \"tp_bytes\": %lld, \"tp_speedup\": %.4f, "
              "\"ok\": true}\n",
              ranks, (long long)batch, threads, ddp / local, single / ddp, zero1 / local, fsdp / local,
              (long long)mem["ddp"].total(), (long long)mem["zero1"].total(), (long long)mem["fsdp"].total(),
              double(mem["fsdp"].total()) / double(mem["ddp"].total()), (long long)mem["tp"].total(), single / tp);
  distributed::finalize();
  return 0;
}
