// amp::autocast: the user-facing RAII guard for automatic mixed precision (Note [autocast] in
// autograd/src/autocast_policy.h; the policy table is in docs/amp.md).
//
//   { amp::autocast ac(Device::cuda(), DType::bf16);
//     loss = nn::functional::cross_entropy(net.forward(x), y); }   // GEMMs in bf16
//   loss.backward();                                                // outside the guard
//
// Invariants:
// - A guard sets autocast for its device's type only (a CUDA guard leaves CPU ops alone), in
//   its own thread only, and restores that type's previous enabled flag and dtype on exit, so
//   guards nest (an inner `enabled = false` guard turns autocast off for its scope).
// - The weight-cast cache (a parameter cast once per outermost guard) is cleared when the
//   outermost guard exits, so the next step's forward casts the updated parameters again.
// - Guards must be destroyed in the reverse order of construction (they are scoped objects;
//   they cannot be copied or moved).
#pragma once

#include "ember/autocast_state.h"
#include "ember/device.h"
#include "ember/dtype.h"

namespace ember::amp {

class autocast {
 public:
  // dtype must be f16 or bf16 (DTypeError otherwise).
  autocast(Device device, DType dtype, bool enabled = true);
  // The device type's current low-precision dtype (bf16 on CPU, f16 on CUDA by default).
  explicit autocast(Device device, bool enabled = true);
  ~autocast();
  autocast(const autocast&) = delete;
  autocast& operator=(const autocast&) = delete;

 private:
  DeviceType device_type_;
  bool prev_enabled_;
  DType prev_dtype_;
};

// Whether autocast is on for a device type in this thread (any device type when omitted).
bool autocast_enabled(DeviceType device_type);
bool autocast_enabled();
// The low-precision dtype autocast uses for a device type in this thread.
DType autocast_dtype(DeviceType device_type);

}  // namespace ember::amp
