// The profiler: ops recorded by name and count, nesting arithmetic (self = total - children),
// shapes, memory, backward ranges, threads, the table and the Chrome trace.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include <nlohmann/json.hpp>

#include <ember/ember.h>
#include <ember/profiler.h>

#include "support/test_support.h"

using namespace ember;
namespace prof = ember::profiler;

namespace {

int64_t count_named(const std::vector<prof::Event>& events, const std::string& name) {
  return std::count_if(events.begin(), events.end(),
                       [&](const prof::Event& e) { return e.name == name; });
}

const prof::Event* find_named(const std::vector<prof::Event>& events, const std::string& name) {
  for (const auto& e : events)
    if (e.name == name) return &e;
  return nullptr;
}

const prof::EventAverage* row(const prof::KeyAverages& k, const std::string& name) {
  for (const auto& r : k.rows)
    if (r.name == name) return &r;
  return nullptr;
}

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

}  // namespace

TEST(Profiler, RecordsOpsWithNamesAndCounts) {
  Tensor a = randn({4, 5}), b = randn({4, 5}), w = randn({5, 3});
  prof::Profiler p;
  p.start();
  EXPECT_TRUE(p.running());
  Tensor c;
  for (int i = 0; i < 3; ++i) c = a + b;
  for (int i = 0; i < 2; ++i) c = exp(a);
  Tensor m = matmul(a, w);
  p.stop();
  EXPECT_FALSE(p.running());
  const auto& ev = p.events();
  EXPECT_EQ(count_named(ev, "add"), 3);
  EXPECT_EQ(count_named(ev, "exp"), 2);
  EXPECT_EQ(count_named(ev, "gemm"), 1);
  for (const auto& e : ev) {
    EXPECT_EQ(e.kind, prof::EventKind::op);
    EXPECT_GE(e.end_ns, e.start_ns);
    EXPECT_GE(e.start_ns, 0);
    EXPECT_EQ(e.device, -1);
    EXPECT_EQ(e.cuda_ns, 0);
    EXPECT_TRUE(e.shapes.empty());  // record_shapes is off
  }
  auto k = p.key_averages();
  ASSERT_NE(row(k, "add"), nullptr);
  EXPECT_EQ(row(k, "add")->count, 3);
  EXPECT_EQ(row(k, "exp")->count, 2);
  // Ops at top level have no children: self time is the whole time.
  EXPECT_EQ(row(k, "add")->self_cpu_time_total_ns, row(k, "add")->cpu_time_total_ns);
  // Results are numerically unaffected by profiling.
  EXPECT_TRUE(test::all_close(m, matmul(a, w)));
}

TEST(Profiler, OffRecordsNothing) {
  Tensor a = ones({3}), b = ones({3});
  Tensor c = a + b;  // before any profiler
  {
    prof::Profiler p;
    p.start();
    p.stop();
    c = a * b;  // after stop
    EXPECT_TRUE(p.events().empty());
    EXPECT_FALSE(prof::detail::active());
  }
  prof::Profiler p;  // constructed, never started
  c = a - b;
  EXPECT_TRUE(p.events().empty());
  // A range opened while off stays inert even if a profiler starts inside it.
  prof::Profiler q;
  {
    prof::record_function r("opened_while_off");
    q.start();
    c = a + b;
  }
  q.stop();
  EXPECT_EQ(count_named(q.events(), "opened_while_off"), 0);
  EXPECT_EQ(count_named(q.events(), "add"), 1);
}

TEST(Profiler, NestedRangesSelfAndTotal) {
  prof::Profiler p;
  const auto t0 = std::chrono::steady_clock::now();
  p.start();
  {
    prof::record_function outer("outer");
    sleep_ms(20);
    {
      prof::record_function inner("inner");
      sleep_ms(30);
    }
  }
  p.stop();
  const int64_t wall_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
  const auto& ev = p.events();
  ASSERT_EQ(ev.size(), 2u);
  const prof::Event& o = ev[0];
  const prof::Event& i = ev[1];
  EXPECT_EQ(o.name, "outer");
  EXPECT_EQ(i.name, "inner");
  EXPECT_EQ(o.kind, prof::EventKind::user);
  EXPECT_EQ(o.parent, -1);
  EXPECT_EQ(i.parent, 0);
  EXPECT_EQ(o.depth, 0);
  EXPECT_EQ(i.depth, 1);
  EXPECT_EQ(o.thread, i.thread);
  // Bounds that hold on any machine, however loaded: a sleep lasts at least as asked, and a
  // range lasts no longer than the test's own clock saw around the whole block.
  EXPECT_GE(i.cpu_ns(), 30'000'000);
  EXPECT_GE(o.cpu_ns(), 50'000'000);
  EXPECT_LE(o.cpu_ns(), wall_ns);
  EXPECT_GE(i.start_ns, o.start_ns);
  EXPECT_LE(i.end_ns, o.end_ns);
  // Exact arithmetic: self = total - children.
  EXPECT_EQ(o.self_cpu_ns, o.cpu_ns() - i.cpu_ns());
  EXPECT_EQ(i.self_cpu_ns, i.cpu_ns());
  EXPECT_GE(o.self_cpu_ns, 20'000'000);

  auto k = p.key_averages();
  const auto* ro = row(k, "outer");
  ASSERT_NE(ro, nullptr);
  EXPECT_EQ(ro->count, 1);
  EXPECT_EQ(ro->cpu_time_total_ns, o.cpu_ns());
  EXPECT_EQ(ro->self_cpu_time_total_ns, o.self_cpu_ns);

  const std::string t = p.table("self_cpu_time_total", 10);
  EXPECT_NE(t.find("Self CPU %"), std::string::npos);
  EXPECT_NE(t.find("CPU total"), std::string::npos);
  EXPECT_NE(t.find("# of Calls"), std::string::npos);
  EXPECT_EQ(t.find("CUDA total"), std::string::npos);  // no CUDA work was recorded
  EXPECT_NE(t.find("Self CPU time total:"), std::string::npos);
  // Sorted by the self times the profiler reports (whichever is larger comes first): not by
  // the sleeps, which a loaded machine may stretch unevenly.
  ASSERT_NE(t.find("inner"), std::string::npos);
  ASSERT_NE(t.find("outer"), std::string::npos);
  if (i.self_cpu_ns > o.self_cpu_ns) {
    EXPECT_LT(t.find("inner"), t.find("outer")) << t;
  } else if (o.self_cpu_ns > i.self_cpu_ns) {
    EXPECT_LT(t.find("outer"), t.find("inner")) << t;
  }
  // The percentages of self time: inner + outer = 100%.
  EXPECT_NE(t.find("100.00%"), std::string::npos);  // outer's CPU total %
}

TEST(Profiler, OpsNestInsideUserRanges) {
  Tensor a = randn({8}), b = randn({8});
  prof::Profiler p;
  p.start();
  {
    prof::record_function r("step");
    Tensor c = mul(a, b);
    Tensor d = add(c, a);
  }
  p.stop();
  const auto& ev = p.events();
  const prof::Event* step = find_named(ev, "step");
  ASSERT_NE(step, nullptr);
  const int step_index = int(step - ev.data());
  int64_t children = 0;
  for (const auto& e : ev)
    if (e.name == "mul" || e.name == "add") {
      EXPECT_EQ(e.parent, step_index);
      EXPECT_EQ(e.depth, 1);
      children += e.cpu_ns();
    }
  EXPECT_EQ(count_named(ev, "mul"), 1);
  EXPECT_EQ(count_named(ev, "add"), 1);
  EXPECT_EQ(step->self_cpu_ns, step->cpu_ns() - children);
}

TEST(Profiler, RecordsShapes) {
  Tensor a = randn({2, 3}), b = randn({2, 3}), s = randn({3});
  prof::Profiler p({.record_shapes = true});
  p.start();
  Tensor c = a + b;
  Tensor d = a + s;  // broadcast: the output has a's shape
  Tensor e = sum(a, {1});
  p.stop();
  const auto& ev = p.events();
  std::vector<std::vector<Shape>> add_shapes;
  for (const auto& e : ev)
    if (e.name == "add") add_shapes.push_back(e.shapes);
  ASSERT_EQ(add_shapes.size(), 2u);
  EXPECT_EQ(add_shapes[0], (std::vector<Shape>{{2, 3}, {2, 3}, {2, 3}}));
  EXPECT_EQ(add_shapes[1], (std::vector<Shape>{{2, 3}, {3}, {2, 3}}));

  auto k = p.key_averages(/*group_by_input_shape=*/true);
  int add_rows = 0;
  for (const auto& r : k.rows)
    if (r.name == "add") {
      ++add_rows;
      EXPECT_EQ(r.count, 1);
      EXPECT_TRUE(r.input_shapes == "[[2, 3], [2, 3], [2, 3]]" ||
                  r.input_shapes == "[[2, 3], [3], [2, 3]]")
          << r.input_shapes;
    }
  EXPECT_EQ(add_rows, 2);
  const std::string t = k.table("count", -1);
  EXPECT_NE(t.find("Input Shapes"), std::string::npos);
  EXPECT_NE(t.find("[[2, 3], [3], [2, 3]]"), std::string::npos);
  // Ungrouped: one add row with both calls.
  auto flat = p.key_averages();
  EXPECT_EQ(row(flat, "add")->count, 2);
  EXPECT_EQ(flat.table().find("Input Shapes"), std::string::npos);
}

TEST(Profiler, BackwardNodesAppearWithTheirOps) {
  Tensor x = randn({4, 4}).requires_grad_();
  Tensor w = randn({4, 4});
  Tensor loss = sum(mul(x, w));
  prof::Profiler p;
  p.start();
  loss.backward();
  p.stop();
  const auto& ev = p.events();
  const prof::Event* mb = find_named(ev, "mul_backward");
  ASSERT_NE(mb, nullptr);
  EXPECT_EQ(mb->kind, prof::EventKind::backward);
  EXPECT_NE(find_named(ev, "sum_backward"), nullptr);
  EXPECT_NE(find_named(ev, "AccumulateGrad"), nullptr);
  // mul's VJP (g * w) runs inside its node's range.
  const int mb_index = int(mb - ev.data());
  bool nested_mul = false;
  for (const auto& e : ev)
    if (e.name == "mul" && e.parent == mb_index) nested_mul = true;
  EXPECT_TRUE(nested_mul);
  EXPECT_TRUE(test::all_close(x.grad(), w));
}

TEST(Profiler, MemoryOfRanges) {
  prof::Profiler p({.profile_memory = true});
  Tensor keep;
  p.start();
  {
    prof::record_function r("alloc");
    keep = empty({1024});  // 4096 bytes that outlive the range
  }
  {
    prof::record_function r("transient");
    Tensor t = empty({1024});
  }
  p.stop();
  const auto& ev = p.events();
  const prof::Event* alloc = find_named(ev, "alloc");
  const prof::Event* transient = find_named(ev, "transient");
  ASSERT_NE(alloc, nullptr);
  ASSERT_NE(transient, nullptr);
  EXPECT_EQ(alloc->cpu_memory, 4096);
  EXPECT_EQ(transient->cpu_memory, 0);
  const std::string t = p.table("cpu_memory_usage");
  EXPECT_NE(t.find("CPU Mem"), std::string::npos);
  EXPECT_NE(t.find("4.00 Kb"), std::string::npos);
}

TEST(Profiler, RecordsEveryThread) {
  Tensor a = ones({4}), b = ones({4});
  prof::Profiler p;
  p.start();
  Tensor c = a + b;
  std::thread t([&] {
    Tensor d = a * b;
    Tensor e = a * b;
  });
  t.join();
  p.stop();
  const auto& ev = p.events();
  const prof::Event* add = find_named(ev, "add");
  const prof::Event* mul = find_named(ev, "mul");
  ASSERT_NE(add, nullptr);
  ASSERT_NE(mul, nullptr);
  EXPECT_EQ(count_named(ev, "mul"), 2);
  EXPECT_NE(add->thread, mul->thread);
}

TEST(Profiler, RangeOpenAtStopEndsThere) {
  prof::Profiler p;
  p.start();
  int64_t until_stop_ns = 0;
  {
    const auto t0 = std::chrono::steady_clock::now();
    prof::record_function r("open_at_stop");
    sleep_ms(5);
    p.stop();
    until_stop_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
    sleep_ms(20);  // after stop: not counted
  }
  const prof::Event* e = find_named(p.events(), "open_at_stop");
  ASSERT_NE(e, nullptr);
  EXPECT_GE(e->cpu_ns(), 5'000'000);
  // The range ended at stop(): no longer than the time from its opening to stop()'s return,
  // however loaded the machine (a range ended at its close would include the 20 ms after).
  EXPECT_LE(e->cpu_ns(), until_stop_ns);
}

TEST(Profiler, StartStopWhileAnotherThreadDispatches) {
  std::atomic<bool> done{false};
  std::atomic<int64_t> worker_adds{0};
  Tensor a = ones({4});
  std::thread worker([&] {
    while (!done.load()) {
      prof::record_function r("work");
      Tensor c = a + a;
      ++worker_adds;
    }
  });
  // The worker must be running before the sessions begin; a loaded machine may start it late.
  while (worker_adds.load() == 0) std::this_thread::yield();
  int64_t adds = 0;
  // At least 20 sessions, and more (up to 2000) until one has seen the worker's adds: a busy
  // machine may leave the worker unscheduled during a short session.
  for (int i = 0; i < 2000 && (i < 20 || adds == 0); ++i) {
    prof::Profiler p;
    p.start();
    sleep_ms(2);
    p.stop();
    const auto& ev = p.events();
    // Ops sit in the worker's "work" ranges, or at top level when the session began inside one.
    for (const auto& e : ev) {
      EXPECT_TRUE(e.name == "work" || e.name == "add") << e.name;
      EXPECT_LE(e.start_ns, e.end_ns);
      if (e.parent >= 0) {
        EXPECT_EQ(ev[size_t(e.parent)].name, "work");
      }
    }
    adds += count_named(ev, "add");
  }
  done = true;
  worker.join();
  EXPECT_GT(adds, 0);
}

TEST(Profiler, TableSortingAndErrors) {
  Tensor a = ones({4});
  prof::Profiler p;
  p.start();
  for (int i = 0; i < 5; ++i) Tensor c = a + a;
  Tensor d = exp(a);
  p.stop();
  const std::string t = p.table("count", 1);
  EXPECT_NE(t.find("add"), std::string::npos);
  EXPECT_EQ(t.find("exp"), std::string::npos);  // row_limit 1
  const std::string all = p.table("count", -1);
  EXPECT_NE(all.find("exp"), std::string::npos);
  EXPECT_NE(test::message_of<ValueError>([&] { p.table("bogus"); }).find("unknown sort_by 'bogus'"),
            std::string::npos);
}

TEST(Profiler, OneAtATimeAndRestart) {
  prof::Profiler p, q;
  p.start();
  EXPECT_NE(test::message_of<Error>([&] { q.start(); }).find("another profiler is already running"),
            std::string::npos);
  EXPECT_NE(test::message_of<Error>([&] { p.start(); }).find("running profiler"),
            std::string::npos);
  p.stop();
  // Restarting clears the previous results.
  Tensor a = ones({2});
  q.start();
  Tensor c = a + a;
  q.stop();
  EXPECT_EQ(count_named(q.events(), "add"), 1);
  q.start();
  q.stop();
  EXPECT_TRUE(q.events().empty());
  // The RAII guard starts at construction and its results stop it.
  {
    prof::Profile guard;
    EXPECT_TRUE(prof::detail::active());
    Tensor e = exp(a);
    EXPECT_EQ(count_named(guard.events(), "exp"), 1);
    EXPECT_FALSE(guard.running());
  }
  {
    prof::Profile guard;
  }
  EXPECT_FALSE(prof::detail::active());
}

TEST(Profiler, ChromeTraceIsValidAndNested) {
  Tensor a = randn({16, 16}), b = randn({16, 16});
  prof::Profiler p({.record_shapes = true});
  p.start();
  {
    prof::record_function r("forward");
    Tensor c = matmul(a, b);
    {
      prof::record_function r2("inner");
      c = relu(c + a);
    }
  }
  std::thread t([&] { Tensor d = a * b; });
  t.join();
  p.stop();
  const auto path = std::filesystem::temp_directory_path() /
                    ("ember_trace_" + std::to_string(::getpid()) + ".json");
  p.export_chrome_trace(path.string());
  std::ifstream f(path);
  nlohmann::json doc = nlohmann::json::parse(f);  // throws on invalid JSON
  std::filesystem::remove(path);
  ASSERT_TRUE(doc.contains("traceEvents"));
  const auto& events = doc["traceEvents"];
  std::map<int64_t, std::vector<std::pair<double, double>>> by_tid;
  std::map<std::string, int> names;
  for (const auto& e : events) {
    if (e["ph"] != "X") continue;
    ASSERT_TRUE(e.contains("ts") && e.contains("dur") && e.contains("pid") && e.contains("tid"));
    EXPECT_GE(e["dur"].get<double>(), 0.0);
    by_tid[e["tid"].get<int64_t>()].push_back({e["ts"].get<double>(),
                                               e["ts"].get<double>() + e["dur"].get<double>()});
    names[e["name"].get<std::string>()]++;
    if (e["name"] == "gemm") {
      ASSERT_TRUE(e["args"].contains("Input Shapes"));
      EXPECT_EQ(e["args"]["Input Shapes"][0], nlohmann::json::array({16, 16}));
      EXPECT_EQ(e["cat"], "cpu_op");
    }
    if (e["name"] == "forward") {
      EXPECT_EQ(e["cat"], "user_annotation");
    }
  }
  EXPECT_EQ(names["forward"], 1);
  EXPECT_EQ(names["inner"], 1);
  EXPECT_EQ(names["gemm"], 1);
  EXPECT_EQ(names["relu"], 1);
  EXPECT_EQ(names["mul"], 1);
  EXPECT_EQ(by_tid.size(), 2u);  // two threads
  // Per thread, any two intervals are disjoint or one contains the other.
  const double eps = 1e-3;  // us: one ns of rounding
  for (auto& [tid, iv] : by_tid) {
    for (size_t i = 0; i < iv.size(); ++i)
      for (size_t j = i + 1; j < iv.size(); ++j) {
        auto [s1, e1] = iv[i];
        auto [s2, e2] = iv[j];
        const bool disjoint = e1 <= s2 + eps || e2 <= s1 + eps;
        const bool nested = (s1 <= s2 + eps && e2 <= e1 + eps) || (s2 <= s1 + eps && e1 <= e2 + eps);
        EXPECT_TRUE(disjoint || nested) << "tid " << tid << ": [" << s1 << ", " << e1 << "] vs ["
                                        << s2 << ", " << e2 << "]";
      }
  }
  EXPECT_NE(test::message_of<IOError>([&] { p.export_chrome_trace("/nonexistent/dir/t.json"); })
                .find("cannot open"),
            std::string::npos);
}

TEST(Profiler, CudaTimesFromEvents) {
  EMBER_SKIP_WITHOUT_CUDA();
  Tensor a = randn({512, 512}, Device::cuda()), b = randn({512, 512}, Device::cuda());
  Tensor warm = matmul(a, b);
  cuda::synchronize();
  prof::Profiler p({.record_shapes = true, .profile_memory = true});
  p.start();
  Tensor c;
  {
    prof::record_function r("gpu_work");
    for (int i = 0; i < 3; ++i) c = matmul(a, b);
  }
  p.stop();
  const auto& ev = p.events();
  EXPECT_EQ(count_named(ev, "gemm"), 3);
  int64_t kernels = 0;
  for (const auto& e : ev)
    if (e.name == "gemm") {
      EXPECT_EQ(e.device, 0);
      EXPECT_GT(e.cuda_ns, 0);
      EXPECT_GE(e.cuda_start_ns, 0);
      EXPECT_GE(e.cuda_end_ns, e.cuda_start_ns);
      EXPECT_GE(e.stream, 0);
      kernels += e.cuda_ns;
    }
  const prof::Event* r = find_named(ev, "gpu_work");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->cuda_ns, kernels);  // a range's CUDA time is its ops'
  EXPECT_GE(r->cuda_memory, 512 * 512 * 4);  // c is alive: at least one output
  const std::string t = p.table("cuda_time_total");
  EXPECT_NE(t.find("CUDA total"), std::string::npos);
  EXPECT_NE(t.find("Self CUDA time total:"), std::string::npos);
  const auto path = std::filesystem::temp_directory_path() / "ember_cuda_trace.json";
  p.export_chrome_trace(path.string());
  std::ifstream f(path);
  nlohmann::json doc = nlohmann::json::parse(f);
  int kernel_events = 0;
  for (const auto& e : doc["traceEvents"])
    if (e["ph"] == "X" && e["cat"] == "kernel") ++kernel_events;
  EXPECT_EQ(kernel_events, 3);
  std::filesystem::remove(path);
}
