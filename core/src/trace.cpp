// The Tracer behind EMBER_TRACE (Note [tracing] in ember/trace.h).
#include "ember/trace.h"

#include <algorithm>

#include "ember/error.h"

namespace ember::trace {

constinit thread_local Tracer* t_tracer = nullptr;

namespace {
uint32_t version_of(const Tensor& t) { return t.defined() ? t.version() : 0; }
}  // namespace

const AttrValue& Event::attr(std::string_view name) const {
  for (const Attr& a : attrs)
    if (a.name == name) return a.value;
  throw ValueError(str("[trace] op '", op, "' reported no attribute '", std::string(name), "'"));
}
bool Event::has_attr(std::string_view name) const {
  return std::any_of(attrs.begin(), attrs.end(), [&](const Attr& a) { return a.name == name; });
}
int64_t Event::attr_int(std::string_view name) const {
  const AttrValue& v = attr(name);
  EMBER_CHECK(std::holds_alternative<int64_t>(v), ValueError, "[trace] attribute '", std::string(name),
              "' of op '", op, "' is not an integer");
  return std::get<int64_t>(v);
}
double Event::attr_double(std::string_view name) const {
  const AttrValue& v = attr(name);
  if (std::holds_alternative<int64_t>(v)) return double(std::get<int64_t>(v));
  EMBER_CHECK(std::holds_alternative<double>(v), ValueError, "[trace] attribute '", std::string(name),
              "' of op '", op, "' is not a number");
  return std::get<double>(v);
}
const std::vector<int64_t>& Event::attr_ints(std::string_view name) const {
  const AttrValue& v = attr(name);
  EMBER_CHECK(std::holds_alternative<std::vector<int64_t>>(v), ValueError, "[trace] attribute '",
              std::string(name), "' of op '", op, "' is not a list of integers");
  return std::get<std::vector<int64_t>>(v);
}

void Tracer::record(const char* op, const Tensor& output, TensorList inputs, std::vector<Attr> attrs) {
  add(op, output, std::move(inputs), std::move(attrs), false);
}
void Tracer::record_node(const char* op, const Tensor& output, TensorList inputs) {
  add(op, output, std::move(inputs), {}, true);
}

void Tracer::record_composite(size_t mark, const char* op, const Tensor& output, TensorList inputs,
                              std::vector<Attr> attrs) {
  mark = std::min(mark, events_.size());
  for (auto it = producers_.begin(); it != producers_.end();)
    it = it->second.event >= mark ? producers_.erase(it) : std::next(it);
  events_.erase(events_.begin() + std::ptrdiff_t(mark), events_.end());
  from_node_.resize(mark);
  add(op, output, std::move(inputs), std::move(attrs), false);
}

void Tracer::add(const char* op, const Tensor& output, TensorList inputs, std::vector<Attr> attrs, bool from_node) {
  const uint32_t out_version = version_of(output);
  std::vector<uint32_t> versions;
  versions.reserve(inputs.size());
  for (const Tensor& in : inputs) versions.push_back(version_of(in));
  if (auto it = producers_.find(output.impl()); it != producers_.end() && it->second.version == out_version) {
    // The op's own record() reported this value a moment ago: the full report replaces it.
    Event& prev = events_[it->second.event];
    if (!from_node && from_node_[it->second.event] && prev.op == op) {
      prev.inputs = std::move(inputs);
      prev.input_versions = std::move(versions);
      prev.attrs = std::move(attrs);
      from_node_[it->second.event] = false;
    }
    return;  // otherwise an inner op reported it and describes it
  }
  // The op returned one of its inputs unchanged.
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].defined() && inputs[i].is_same(output) && versions[i] == out_version) return;
  producers_[output.impl()] = Producer{events_.size(), out_version};
  events_.push_back(Event{op, std::move(inputs), std::move(versions), output, out_version, std::move(attrs)});
  from_node_.push_back(from_node);
}

}  // namespace ember::trace
