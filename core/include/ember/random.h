// Counter-based random numbers (Philox4x32-10, Salmon et al. 2011). A draw is a pure function
// of (seed, counter), so a kernel gives element i the counter (offset + i / 4) and the result
// does not depend on thread count or device: CPU and CUDA produce the same stream.
#pragma once

#include <cstdint>

#include "ember/device.h"
#include "ember/macros.h"

namespace ember {

struct Philox {
  // Four 32-bit uniform words for (seed, counter).
  EMBER_HD static void draw(uint64_t seed, uint64_t counter, uint32_t out[4]) {
    uint32_t c0 = uint32_t(counter), c1 = uint32_t(counter >> 32), c2 = 0, c3 = 0;
    uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
    for (int r = 0; r < 10; ++r) {
      uint64_t p0 = uint64_t(0xD2511F53u) * c0;
      uint64_t p1 = uint64_t(0xCD9E8D57u) * c2;
      uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ k0;
      uint32_t n2 = uint32_t(p0 >> 32) ^ c3 ^ k1;
      c0 = n0;
      c1 = uint32_t(p1);
      c2 = n2;
      c3 = uint32_t(p0);
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
  }
  // Uniform float in [0, 1) from a 32-bit word (24 random bits).
  EMBER_HD static float uniform(uint32_t w) { return float(w >> 8) * (1.0f / 16777216.0f); }
  // Uniform double in [0, 1) from two words (53 random bits).
  EMBER_HD static double uniform_double(uint32_t a, uint32_t b) {
    uint64_t v = (uint64_t(a) << 21) ^ uint64_t(b >> 11);
    return double(v & ((uint64_t(1) << 53) - 1)) * (1.0 / 9007199254740992.0);
  }
};

// A seed plus a running counter offset. Each op reserves the counters it needs, so two ops
// never share random numbers and a rerun from the same state reproduces them exactly.
class Generator {
 public:
  struct State {
    uint64_t seed = 0;
    uint64_t offset = 0;
  };
  explicit Generator(uint64_t seed = 0x5eed) : state_{seed, 0} {}
  void manual_seed(uint64_t seed) { state_ = {seed, 0}; }
  // Reserves `counters` Philox counters and returns the state to draw them from.
  State reserve(uint64_t counters) {
    State s = state_;
    state_.offset += counters;
    return s;
  }
  State get_state() const { return state_; }
  void set_state(State s) { state_ = s; }

 private:
  State state_;
};

// The default generator of a device (one per CUDA device, one for the CPU).
Generator& default_generator(Device device = Device::cpu());
// Seeds every default generator, like torch.manual_seed.
void manual_seed(uint64_t seed);

}  // namespace ember
