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
