// Note [tracing]: how an exporter (io::export_onnx) sees the ops a forward pass runs. ember has
// no dispatcher to intercept, so ops report themselves to the thread's Tracer once their output
// exists. Every differentiable op already calls autograd::record(name, output, {inputs}, vjp):
// with a Tracer installed, record reports (name, output, inputs) by itself, so an op without
// non-tensor arguments needs nothing more. An op with attributes (a dim, a stride, an epsilon)
// or with inputs that record does not list (where's condition) reports itself in full after
// its record; its report replaces record's of the same op and output:
//
//   Tensor y = record("conv2d", ops::conv2d(x, w, b, p), {x, w, b}, vjp);
//   EMBER_TRACE(y, "conv2d", {x, w, b}, {{"stride", stride}, {"padding", padding}, ...});
//   return y;
//
// Inputs are every tensor the op reads, in its signature's order (an absent optional one as an
// undefined tensor); attributes are the arguments that are not tensors. Off (no Tracer on the
// thread) the cost is one thread-local load and a branch in record; nothing is built.
//
// What the Tracer keeps, and why that is enough for a graph that is never silently wrong:
//  - An op built from other ops (reshape -> view, flatten -> reshape, conv2d of an unbatched
//    input -> unsqueeze, conv2d, squeeze) is described by the inner ops: a report of a value
//    an inner op already reported (same tensor, same storage version) is dropped, and so is
//    one whose output is an input returned unchanged (dropout in eval).
//  - Each event keeps the storage versions of the tensors it read and wrote, so the exporter
//    refuses a value modified in place after it was reported (by an op it cannot see).
//  - Reports of ops the exporter cannot express stay in the trace: it fails naming the op when
//    the graph's outputs depend on one, and ignores it otherwise.
//  - The exporter traces twice (other sizes along the dynamic axes, other values) and compares,
//    which tells which dims and attributes follow the dynamic axes and which tensors that no
//    op reported are true constants (Note [onnx export] in io/onnx/export.cpp).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "ember/macros.h"
#include "ember/tensor.h"

namespace ember::trace {

using AttrValue = std::variant<int64_t, double, std::vector<int64_t>, std::string>;

// One non-tensor argument of a traced op. Bools and ints are int64_t, sizes are a vector.
struct Attr {
  std::string name;
  AttrValue value;
  Attr(std::string n, int64_t v) : name(std::move(n)), value(v) {}
  Attr(std::string n, int v) : name(std::move(n)), value(int64_t(v)) {}
  Attr(std::string n, bool v) : name(std::move(n)), value(int64_t(v)) {}
  Attr(std::string n, double v) : name(std::move(n)), value(v) {}
  Attr(std::string n, const Shape& s) : name(std::move(n)), value(std::vector<int64_t>(s.begin(), s.end())) {}
  Attr(std::string n, std::vector<int64_t> v) : name(std::move(n)), value(std::move(v)) {}
  template <size_t N>
  Attr(std::string n, const std::array<int64_t, N>& a) : name(std::move(n)), value(std::vector<int64_t>(a.begin(), a.end())) {}
  Attr(std::string n, std::string s) : name(std::move(n)), value(std::move(s)) {}
  Attr(std::string n, const char* s) : name(std::move(n)), value(std::string(s)) {}
  bool operator==(const Attr&) const = default;
};

// One op the forward ran, as reported by EMBER_TRACE.
struct Event {
  std::string op;
  TensorList inputs;                     // undefined where an optional input is absent
  std::vector<uint32_t> input_versions;  // each input's storage version when the op ran (0 if undefined)
  Tensor output;
  uint32_t output_version = 0;
  std::vector<Attr> attrs;
  // The attribute called `name`; throws ValueError naming the op when it is missing.
  const AttrValue& attr(std::string_view name) const;
  int64_t attr_int(std::string_view name) const;
  double attr_double(std::string_view name) const;
  const std::vector<int64_t>& attr_ints(std::string_view name) const;
  bool has_attr(std::string_view name) const;
};

// Collects what one forward pass runs on the thread that installed it (TracingGuard).
class Tracer {
 public:
  // The reported ops, in the order they ran.
  const std::vector<Event>& events() const { return events_; }

  // An op's full report (EMBER_TRACE).
  void record(const char* op, const Tensor& output, TensorList inputs, std::vector<Attr> attrs = {});
  // autograd::record's report: the op's name, output and differentiable inputs.
  void record_node(const char* op, const Tensor& output, TensorList inputs);
  // A composite op's full report (EMBER_TRACE_COMPOSITE): it replaces the events its own
  // implementation recorded since `mark` (events().size() at its entry).
  void record_composite(size_t mark, const char* op, const Tensor& output, TensorList inputs,
                        std::vector<Attr> attrs = {});

 private:
  struct Producer {
    size_t event;
    uint32_t version;
  };
  std::vector<Event> events_;
  std::vector<bool> from_node_;  // per event: reported by autograd::record, may be replaced
  // Output tensor -> the event that reported its current value. The events hold the tensors,
  // so no address is reused while the trace lives.
  std::unordered_map<const TensorImpl*, Producer> producers_;
  void add(const char* op, const Tensor& output, TensorList inputs, std::vector<Attr> attrs, bool from_node);
};

EMBER_HOT_TLS extern constinit thread_local Tracer* t_tracer;
inline bool active() noexcept { return t_tracer != nullptr; }
// At a composite op's entry, for EMBER_TRACE_COMPOSITE at its end (0 when not tracing).
inline size_t mark() noexcept { return t_tracer ? t_tracer->events().size() : 0; }

// Installs `tracer` on this thread for its lifetime (nesting restores the previous one).
class TracingGuard {
 public:
  explicit TracingGuard(Tracer& tracer) noexcept : prev_(t_tracer) { t_tracer = &tracer; }
  ~TracingGuard() { t_tracer = prev_; }
  TracingGuard(const TracingGuard&) = delete;
  TracingGuard& operator=(const TracingGuard&) = delete;

 private:
  Tracer* prev_;
};

}  // namespace ember::trace

// An op built from other ops that ONNX has one node for (conv_transpose2d: a pad, the core
// op and a bias add) reports itself once at its end, replacing what its body reported:
//   const size_t trace_mark = trace::mark();  ...  EMBER_TRACE_COMPOSITE(trace_mark, y, "op", {...}, {...});
#define EMBER_TRACE_COMPOSITE(mark, output, op, ...)                                  \
  do {                                                                                \
    if (::ember::trace::active()) [[unlikely]]                                        \
      ::ember::trace::t_tracer->record_composite(mark, op, output, __VA_ARGS__);      \
  } while (0)

// Reports an op to the thread's Tracer (Note [tracing]): EMBER_TRACE(output, "name", {inputs},
// {{"attr", value}, ...}); the attribute list may be left out.
#define EMBER_TRACE(output, op, ...)                                   \
  do {                                                                 \
    if (::ember::trace::active()) [[unlikely]]                         \
      ::ember::trace::t_tracer->record(op, output, __VA_ARGS__);       \
  } while (0)
