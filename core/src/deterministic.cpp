// The determinism switch (Note [Determinism] in ember/deterministic.h).
#include "ember/deterministic.h"

#include <atomic>

namespace ember {

namespace {
std::atomic<bool> deterministic{false};
}

void set_deterministic(bool enabled) { deterministic.store(enabled, std::memory_order_relaxed); }
bool is_deterministic() { return deterministic.load(std::memory_order_relaxed); }

}  // namespace ember
