// Anomaly detection (PyTorch's torch.autograd.detect_anomaly): while a detect_anomaly guard is
// alive on a thread,
//  1. every node recorded on that thread remembers where its forward was called (the raw
//     return addresses of the caller's stack; they are turned into names only if an error is
//     reported), and
//  2. backward checks each gradient a node's VJP returns and throws AutogradError naming the
//     op, the input, and that forward call stack when a gradient holds NaN or inf.
// Off, its whole cost is one thread-local bool test per recorded node (docs/reliability.md).
// The mode is read where a node is recorded and where backward runs: a backward started
// inside a guard checks every node, even nodes recorded outside it (those have no forward
// trace to show).
#pragma once

#include <memory>
#include <string>

#include "ember/autograd/node.h"

namespace ember::autograd {

namespace detail {
// The thread's mode; constinit so that reading it needs no TLS initialization call.
EMBER_HOT_TLS extern constinit thread_local bool anomaly_enabled;
}  // namespace detail

inline bool is_anomaly_enabled() { return detail::anomaly_enabled; }

// RAII: switches anomaly detection on (or off, with false) for this thread and restores the
// previous mode on destruction, so guards nest.
class detect_anomaly {
 public:
  explicit detect_anomaly(bool enabled = true) : prev_(detail::anomaly_enabled) {
    detail::anomaly_enabled = enabled;
  }
  ~detect_anomaly() { detail::anomaly_enabled = prev_; }
  detect_anomaly(const detect_anomaly&) = delete;
  detect_anomaly& operator=(const detect_anomaly&) = delete;

 private:
  bool prev_;
};

// Where a node's forward was called: return addresses, symbolized lazily.
struct ForwardSite {
  static constexpr int kMaxFrames = 32;
  void* frames[kMaxFrames];
  int count = 0;
};

namespace detail {
// Captures the current call stack (called from attach() when the mode is on).
std::unique_ptr<ForwardSite> capture_forward_site();
// The trace, one demangled frame a line, with ember's recording machinery left out.
std::string format_forward_site(const ForwardSite& site);
// Throws AutogradError if a floating gradient in `grads` holds NaN or inf.
void check_gradients(const Node& node, const TensorList& grads);
}  // namespace detail

}  // namespace ember::autograd
