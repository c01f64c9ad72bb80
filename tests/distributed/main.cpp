// test_distributed's main: distributed::init() around the whole suite (MPI may be initialized
// only once per process), and the crash helpers that test_failures.cpp launches under mpirun:
//   test_distributed --crash=kill|throw|hang|init
// Each helper starts the environment, does one all_reduce, then rank 1 fails in its way while
// rank 0 enters a collective rank 1 never joins. The job must end non-zero, quickly.
// ("init" only starts the environment: test_failures.cpp checks what a bad one says.)
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>

#include <ember/ember.h>

using namespace ember;

namespace {
// Open MPI keeps allocations made by MPI_Init until the process exits, which LeakSanitizer (the
// sanitizer run of scripts/test.sh) would report as leaks. A process that started MPI therefore
// ends without the exit-time leak check; the single-process run of this binary (no MPI) keeps
// it, so ember's own code is still leak-checked by the same tests.
[[noreturn]] void exit_without_leak_check(int rc) {
  std::fflush(nullptr);
  std::_Exit(rc);
}

// Rank 1 fails inside FSDP's collectives: "fsdp-gather" hangs before the second unit's
// all_gather (rank 0 times out in it), "fsdp-reduce" dies by SIGKILL before the first unit's
// reduce_scatter (rank 0 waits in it until mpirun ends the job), "fsdp-save" saves a sharded
// checkpoint of step 1 into $EMBER_CRASH_DIR, then dies by SIGKILL in the middle of saving
// step 2 (its file written, before rank 0 puts the folder in place).
int fsdp_crash(const std::string& mode) {
  return distributed::abort_on_error([&] {
    struct Two : nn::Module {
      nn::Linear a{8, 16}, b{16, 4};
      Two() {
        register_module("a", a);
        register_module("b", b);
      }
      Tensor forward(const Tensor& x) const { return b(relu(a(x))); }
    } net;
    if (distributed::rank() == 1) {
      // Registered before fully_shard's own hooks, so they run first.
      if (mode == "fsdp-gather")
        net.b.register_forward_pre_hook([](const nn::Module&, const Tensor&) {
          std::this_thread::sleep_for(std::chrono::seconds(50));
          return Tensor();
        });
      else if (mode == "fsdp-reduce")
        net.a.weight.register_post_accumulate_grad_hook([](const Tensor&) { std::raise(SIGKILL); });
    }
    distributed::fully_shard(net.a);
    distributed::fully_shard(net.b);
    distributed::FSDPModule fsdp = distributed::fully_shard(net);
    Tensor x = randn({4, 8});
    fsdp.forward([&] { return net.forward(x); }).sum().backward();
    if (mode == "fsdp-save") {
      const char* dir = std::getenv("EMBER_CRASH_DIR");
      if (dir == nullptr) throw std::runtime_error("fsdp-save needs EMBER_CRASH_DIR");
      optim::AdamW opt(fsdp.parameters());
      opt.step();
      int barriers = 0;
      for (int64_t step : {1, 2})
        io::save_sharded_checkpoint(dir, {.state = fsdp.sharded_state_dict(&opt), .step = step},
                                    distributed::rank(), 2, [&] {
                                      // The second barrier of the second save: files written.
                                      if (++barriers == 5 && distributed::rank() == 1) std::raise(SIGKILL);
                                      fsdp.process_group().barrier();
                                    });
    }
    distributed::finalize();
    return 0;
  });
}

int crash_helper(const std::string& mode) {
  if (mode == "init") {  // only init() under whatever environment the caller set
    int rc = 0;
    try {
      distributed::init();
      distributed::finalize();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "init failed: %s\n", e.what());
      rc = 2;
    }
    exit_without_leak_check(rc);
  }
  distributed::init({.timeout = std::chrono::seconds(3)});
  auto pg = distributed::default_group();
  Tensor t = ones({4});
  pg->all_reduce(t);
  if (mode.rfind("fsdp-", 0) == 0) return fsdp_crash(mode);
  if (distributed::rank() == 1) {
    if (mode == "kill") std::raise(SIGKILL);
    if (mode == "throw") throw std::runtime_error("rank 1 failed on purpose");  // -> terminate
    if (mode == "hang") std::this_thread::sleep_for(std::chrono::seconds(50));
  }
  // Rank 0: rank 1 never joins this. With "hang" the timeout throws, abort_on_error aborts.
  return distributed::abort_on_error([&] {
    pg->all_reduce(t);
    distributed::finalize();
    return 0;
  });
}
}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], "--crash=", 8) == 0) return crash_helper(argv[i] + 8);
  ::testing::InitGoogleTest(&argc, argv);
  distributed::init();
  const int rc = RUN_ALL_TESTS();
  if (rc != 0 && distributed::world_size() > 1) {
    // A failure on one rank may leave the others' later collectives unmatched: end the job.
    distributed::abort("a test failed on this rank", rc);
  }
  const bool mpi = distributed::world_size() > 1 || std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr;
  distributed::finalize();
  if (mpi) exit_without_leak_check(rc);
  return rc;
}
