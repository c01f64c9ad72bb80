// ember-info: what this ember build is and what it can see, like a friendly nvidia-smi:
// build (CUDA, architectures, CPU threads, BLAS), driver/runtime/cuBLAS/cuDNN/NCCL versions,
// every visible device's properties and ember's allocator statistics for it, and with
// --estimate the memory a training run of a given size needs and whether it fits on each
// device (tools/memory_estimate.h holds the formulas).
//
// Exit status: 0 whenever it could answer, including on a machine without a GPU or a
// CPU-only build ("no CUDA device" is an answer, not an error); non-zero for bad flags (the
// message names the flag) or a failing CUDA query.
#include <omp.h>

#include <cstdio>
#include <exception>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <ember/cuda_memory.h>
#include <ember/ember.h>

#include "../examples/common/cli_checks.h"  // parse_flags, exit_code_of: shared with the examples
#include "library_versions.h"
#include "memory_estimate.h"

#ifndef EMBER_VERSION_STRING
#define EMBER_VERSION_STRING "unknown"
#endif
#ifndef EMBER_CUDA_ARCHITECTURES
#define EMBER_CUDA_ARCHITECTURES ""
#endif
#ifndef EMBER_EIGEN_VERSION
#define EMBER_EIGEN_VERSION "unknown"
#endif

namespace {

using namespace ember::tools;

// A CLI11 check that accepts what parse_count accepts ("124M", "1.5B", "7e9").
// `what` and its examples name the flag's own kind of number: "--layers -1" is answered with
// layer counts, not with parameter counts.
CLI::Validator count_validator(const char* what, const char* examples) {
  return CLI::Validator(
      [what, examples](std::string& s) -> std::string {
        if (parse_count(s)) return {};
        return "'" + s + "' is not " + what + ": a positive number (examples: " + examples + ")";
      },
      "COUNT");
}

std::string mhz(int khz) { return std::to_string((khz + 500) / 1000) + " MHz"; }

void print_device(const ember::cuda::DeviceProperties& p) {
  std::printf("\ncuda:%d  %s\n", p.index, p.name.c_str());
  std::printf("  compute capability  %d.%d (sm_%d%d)\n", p.major, p.minor, p.major, p.minor);
  std::printf("  memory              %s total, %s free  (%.1f / %.1f GiB)\n",
              format_bytes(double(p.total_memory)).c_str(),
              format_bytes(double(p.free_memory)).c_str(), double(p.free_memory) / (1 << 30),
              double(p.total_memory) / (1 << 30));
  std::printf("  multiprocessors     %d SMs, %d threads/SM, warp %d\n", p.multiprocessor_count,
              p.max_threads_per_multiprocessor, p.warp_size);
  std::printf("  clocks              SM %s, memory %s, bus %d-bit: %s/s peak bandwidth\n",
              mhz(p.clock_rate_khz).c_str(), mhz(p.memory_clock_rate_khz).c_str(),
              p.memory_bus_width, format_bytes(p.peak_memory_bandwidth()).c_str());
  std::printf("  caches              L2 %s; shared memory %s/block (%s opt-in), %s/SM\n",
              format_bytes(double(p.l2_cache_size)).c_str(),
              format_bytes(double(p.shared_memory_per_block)).c_str(),
              format_bytes(double(p.shared_memory_per_block_optin)).c_str(),
              format_bytes(double(p.shared_memory_per_multiprocessor)).c_str());
  std::printf("  ECC                 %s\n", p.ecc_enabled ? "on" : "off");
  std::printf("  PCI bus id          %s\n", p.pci_bus_id.c_str());
  const ember::cuda::MemoryStats s = ember::cuda::memory_stats(p.index);
  std::printf("  ember allocator     %s allocated (peak %s), %s reserved (peak %s)\n",
              format_bytes(double(s.allocated_bytes)).c_str(),
              format_bytes(double(s.peak_allocated_bytes)).c_str(),
              format_bytes(double(s.reserved_bytes)).c_str(),
              format_bytes(double(s.peak_reserved_bytes)).c_str());
}

void print_estimate(const EstimateInput& in, const MemoryEstimate& m,
                    const std::vector<ember::cuda::DeviceProperties>& devices) {
  const std::string count = format_count(in.params);
  const double a = bytes_per_element(in.dtype);
  std::printf("\nMemory estimate: %s parameters, %s, %s  (1 MB = 10^6 bytes, 1 GB = 10^9)\n",
              count.c_str(), to_string(in.dtype), to_string(in.optimizer));
  auto row = [](const char* name, double bytes, const std::string& why) {
    if (why.empty()) std::printf("  %-17s %11s\n", name, format_bytes(bytes).c_str());
    else std::printf("  %-17s %11s   %s\n", name, format_bytes(bytes).c_str(), why.c_str());
  };
  const std::string per = count + " x " + std::to_string(int(a)) + " B (" + to_string(in.dtype) + ")";
  row("weights", m.weights, per);
  row("gradients", m.gradients, per);
  if (m.master_weights > 0) row("master weights", m.master_weights, count + " x 4 B (f32 copy)");
  switch (in.optimizer) {
    case OptimizerKind::adamw:
    case OptimizerKind::adam: row("optimizer state", m.optimizer_state, "2 f32 moments"); break;
    case OptimizerKind::sgd_momentum: row("optimizer state", m.optimizer_state, "f32 momentum"); break;
    case OptimizerKind::sgd: row("optimizer state", m.optimizer_state, "none"); break;
  }
  if (m.activations_from_formula) {
    std::string why = "layers x tokens x hidden x (16 x " + std::to_string(int(a)) + " B + 2)";
    if (in.seq_len > 0 && in.heads > 0) why += " + attention scores";
    if (in.vocab > 0) why += " + f32 logits";
    row("activations", m.activations, why);
  } else {
    row("activations", m.activations,
        "guess: 25% of the above (give --batch-tokens, --layers, --hidden for the formula)");
  }
  row("workspace", m.workspace, "CUDA context, cuBLASLt/cuDNN workspaces, rounding");
  row("total", m.total(), "");

  if (devices.empty()) {
    std::printf("  fits?             no CUDA device to compare with: the estimate alone\n");
    return;
  }
  for (const auto& p : devices) {
    const double total = double(p.total_memory), free = double(p.free_memory);
    std::printf("  cuda:%d (%s, %s): ", p.index, p.name.c_str(), format_bytes(total).c_str());
    if (m.total() > total) {
      std::printf("does NOT fit (%s short)\n", format_bytes(m.total() - total).c_str());
    } else if (m.total() > free) {
      std::printf("fits an idle device, but only %s is free now\n", format_bytes(free).c_str());
    } else {
      std::printf("fits (%s to spare)\n", format_bytes(total - m.total()).c_str());
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ember-info: this ember build, its CUDA libraries and devices, and training "
               "memory estimates"};
  std::string params_text, dtype_text = "f32", optimizer_text = "adamw";
  std::string tokens_text, layers_text, hidden_text, seq_text, heads_text, vocab_text;
  bool no_master = false;
  auto* estimate = app.add_option("--estimate", params_text,
                                  "estimate training memory for this many parameters")
                       ->check(count_validator("a parameter count", "124M, 1.5B, 7e9"));
  app.add_option("--dtype", dtype_text, "parameter dtype: f32, bf16 or f16 (default f32)")
      ->check(CLI::IsMember({"f32", "bf16", "f16"}))
      ->needs(estimate);
  app.add_option("--optimizer", optimizer_text,
                 "adamw, adam, sgd or sgd-momentum (default adamw)")
      ->check(CLI::IsMember({"adamw", "adam", "sgd", "sgd-momentum"}))
      ->needs(estimate);
  app.add_option("--batch-tokens", tokens_text, "tokens per step (batch x sequence length)")
      ->check(count_validator("a token count", "8k, 524288"))
      ->needs(estimate);
  app.add_option("--layers", layers_text, "transformer layers")
      ->check(count_validator("a layer count", "12, 48"))
      ->needs(estimate);
  app.add_option("--hidden", hidden_text, "hidden size")
      ->check(count_validator("a hidden size", "768, 4096"))
      ->needs(estimate);
  app.add_option("--seq-len", seq_text, "sequence length (with --heads: unfused attention scores)")
      ->check(count_validator("a sequence length", "1024, 4k"))
      ->needs(estimate);
  app.add_option("--heads", heads_text, "attention heads (with --seq-len)")
      ->check(count_validator("a head count", "12, 32"))
      ->needs(estimate);
  app.add_option("--vocab", vocab_text, "vocabulary size (adds the f32 logits)")
      ->check(count_validator("a vocabulary size", "50257, 32k"))
      ->needs(estimate);
  app.add_flag("--no-master-weights", no_master, "bf16/f16 params without an f32 master copy")
      ->needs(estimate);
  if (const std::optional<int> rc = ember::examples::parse_flags("ember-info", app, argc, argv)) return *rc;

  return ember::examples::exit_code_of("ember-info", [&] {
    namespace cuda = ember::cuda;
    const std::string runtime = cuda::runtime_version();
    const bool cuda_built = runtime != "none";
    std::printf("ember %s\n", EMBER_VERSION_STRING);
    if (cuda_built) {
      std::printf("build:        CUDA compiled in (runtime %s, architectures %s)\n", runtime.c_str(),
                  EMBER_CUDA_ARCHITECTURES);
    } else {
      std::printf("build:        CPU-only (CUDA not compiled in)\n");
    }
    std::printf("CPU threads:  %d OpenMP (max), %u hardware\n", omp_get_max_threads(),
                std::thread::hardware_concurrency());
    const std::string gpu_blas = cuda_built ? "; GPU cuBLASLt " + cublaslt_version() : "";
    std::printf("BLAS:         CPU Eigen %s%s\n", EMBER_EIGEN_VERSION, gpu_blas.c_str());
    std::printf("versions:     driver %s, runtime %s, cuBLASLt %s, cuDNN %s, NCCL %s\n",
                cuda::driver_version().c_str(), runtime.c_str(), cublaslt_version().c_str(),
                cudnn_version().c_str(), nccl_version().c_str());
    // Opened on first use (Note [vendor libraries]): where a GPU run would load them from.
    if (const std::string where = cuda_library_locations(); !where.empty())
      std::printf("CUDA libs:    %s\n", where.c_str());

    std::vector<cuda::DeviceProperties> devices;
    const int count = cuda::device_count();
    if (!cuda_built) {
      std::printf("CUDA devices: none (no CUDA device: this build of ember is CPU-only)\n");
    } else if (count == 0) {
      std::printf("CUDA devices: none (no CUDA device is visible: no GPU or no driver); "
                  "ember runs on the CPU\n");
    } else {
      std::printf("CUDA devices: %d\n", count);
      for (int i = 0; i < count; ++i) {
        devices.push_back(cuda::get_device_properties(i));
        print_device(devices.back());
      }
    }

    if (!params_text.empty()) {
      EstimateInput in;
      in.params = *parse_count(params_text);
      in.dtype = *parse_param_dtype(dtype_text);
      in.optimizer = *parse_optimizer(optimizer_text);
      in.master_weights = !no_master;
      auto integer = [](const std::string& s) {
        return s.empty() ? int64_t(0) : int64_t(*parse_count(s) + 0.5);
      };
      in.batch_tokens = integer(tokens_text);
      in.layers = integer(layers_text);
      in.hidden = integer(hidden_text);
      in.seq_len = integer(seq_text);
      in.heads = integer(heads_text);
      in.vocab = integer(vocab_text);
      print_estimate(in, estimate_memory(in), devices);
    }
    return 0;
  });
}
