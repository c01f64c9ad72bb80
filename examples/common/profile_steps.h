// --profile N for the example programs: N training steps profiled after a short warm-up
// (allocator caches, cuBLAS handles and autotuning are first-step costs, not steady state);
// each step is a "step" range, so the table's step row counts them. When the N steps are
// done: the op table on stdout, the Chrome trace in <out>/trace.json (ui.perfetto.dev or
// chrome://tracing), and the program stops. See docs/performance.md.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>

#include <ember/profiler.h>

namespace ember::examples {

class StepProfiler {
 public:
  // steps == 0: off, every call does nothing. report: print and write (rank 0 of a DDP job).
  StepProfiler(int64_t steps, std::string out_dir, bool report = true, bool cuda = false,
               int64_t warmup = 2)
      : steps_(steps), warmup_(warmup), report_(report), cuda_(cuda), out_dir_(std::move(out_dir)) {}
  ~StepProfiler() {
    try {
      if (profiler_.running()) finish();  // the run ended before N steps: report what was seen
    } catch (const std::exception& e) {
      std::fprintf(stderr, "profile: %s\n", e.what());
    }
  }

  void begin_step() {
    if (steps_ <= 0) return;
    if (seen_ == warmup_) profiler_.start();
    if (profiler_.running()) range_.emplace("step");
  }

  // True once the N profiled steps are done (table printed, trace written): stop training.
  bool end_step() {
    if (steps_ <= 0) return false;
    range_.reset();
    if (++seen_ < warmup_ + steps_) return false;
    finish();
    return true;
  }

 private:
  void finish() {
    range_.reset();
    profiler_.stop();
    if (!report_) return;
    const int64_t profiled = std::max<int64_t>(0, seen_ - warmup_);
    std::printf("\nprofile of %lld step%s after %lld warm-up (sorted by %s):\n%s",
                (long long)profiled, profiled == 1 ? "" : "s", (long long)warmup_,
                cuda_ ? "self CUDA time" : "self CPU time",
                profiler_.table(cuda_ ? "self_cuda_time_total" : "self_cpu_time_total", 25).c_str());
    std::filesystem::create_directories(out_dir_);
    const std::string trace = (std::filesystem::path(out_dir_) / "trace.json").string();
    profiler_.export_chrome_trace(trace);
    std::printf("trace: %s (open in ui.perfetto.dev or chrome://tracing)\n", trace.c_str());
  }

  int64_t steps_, warmup_, seen_ = 0;
  bool report_, cuda_;
  std::string out_dir_;
  ember::profiler::Profiler profiler_;
  std::optional<ember::profiler::RecordFunction> range_;
};

}  // namespace ember::examples
