// Helpers shared by the distributed tests. The binary runs as one process (world size 1) and
// under mpirun -np 2 (tests/CMakeLists.txt); every test body is written for any world size and
// compares with a result computed locally on each rank (an independent, single-process
// reference), so the same assertions hold in both runs.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

#include "support/test_support.h"

namespace ember::test {

inline int world() { return distributed::world_size(); }
inline int my_rank() { return distributed::rank(); }

// For a test that compares what several ranks computed: with one rank it would compare a
// process with itself and pass without testing anything, so it skips and says why (where it
// runs, or that this build cannot run it at all).
#define EMBER_SKIP_UNLESS_SEVERAL_RANKS()                                                          \
  do {                                                                                             \
    if (::ember::test::world() < 2) {                                                              \
      if (::ember::distributed::mpi_available())                                                   \
        GTEST_SKIP() << "world size 1: compares ranks, so it runs under mpirun -np 2 "             \
                        "(ctest Distributed.mpi_np2)";                                             \
      else                                                                                         \
        GTEST_SKIP() << "this build has no MPI (Debian: libopenmpi-dev openmpi-bin): the "         \
                        "multi-rank DDP and ZeRO tests cannot run";                                \
    }                                                                                              \
  } while (0)

// This rank's GPU when its default CUDA group is NCCL's (Note [device choice]); otherwise
// nullopt and the reason in `why` (no NCCL group, or no GPU of its own: e.g. `mpirun -np 2` on
// a one-GPU machine, where both ranks would share it). Call it with NCCL in the build.
inline std::optional<Device> nccl_device(std::string& why) {
  try {
    const Device dev = distributed::local_device(DeviceType::CUDA);
    if (std::string(distributed::default_group(dev)->backend()) != "nccl") {
      why = "no NCCL group";
      return std::nullopt;
    }
    return dev;
  } catch (const distributed::DistributedError& e) {
    why = e.what();
    return std::nullopt;
  }
}

// For a test on this rank's own GPU through its NCCL group: declares `const Device dev`, or
// skips with the reason. Where a GPU is present, a build that cannot see it or that has no
// NCCL fails (issue 40, item 3): a skip there would read as a pass on the GPU run.
#define EMBER_NCCL_DEVICE_OR_SKIP(dev)                                        \
  EMBER_SKIP_WITHOUT_CUDA();                                                  \
  if (!::ember::distributed::nccl_available())                                \
    FAIL() << "a CUDA device is visible but this build has no NCCL (configure " \
              "with NCCL found: NCCL_ROOT, or Debian's libnccl-dev)";         \
  std::string why_##dev;                                                      \
  const std::optional<Device> opt_##dev = ::ember::test::nccl_device(why_##dev); \
  if (!opt_##dev) GTEST_SKIP() << why_##dev;                                  \
  const Device dev = *opt_##dev

// Largest |a - b| over two tensors of one shape (any dtype).
inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  return a.to(DType::f64).sub(b.to(DType::f64)).abs().max().item<double>();
}

// The largest parameter difference between two modules of one layout.
inline double max_param_diff(const nn::Module& a, const nn::Module& b) {
  auto pa = a.parameters(), pb = b.parameters();
  double m = 0;
  for (size_t i = 0; i < pa.size(); ++i) m = std::max(m, max_abs_diff(pa[i], pb[i]));
  return m;
}

// A prefix for a shell command that starts an MPI job from a test: Open MPI keeps allocations
// made by MPI_Init until exit, which LeakSanitizer (the sanitizer run of scripts/test.sh) would
// report, so the job's processes run with leak detection off (AddressSanitizer's other checks
// stay on; the single-process tests keep the leak check). Empty outside sanitizer runs.
inline std::string without_leak_check() {
  const char* a = std::getenv("ASAN_OPTIONS");
  return a != nullptr ? std::string("ASAN_OPTIONS='") + a + ":detect_leaks=0' " : std::string();
}

struct Mlp : nn::Module {
  nn::Linear fc1{8, 16}, fc2{16, 16}, fc3{16, 4};
  Mlp() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
    register_module("fc3", fc3);
  }
  Tensor forward(const Tensor& x) { return fc3(relu(fc2(relu(fc1(x))))); }
};

}  // namespace ember::test
