// amp::autocast: the RAII guard over the thread-local state in core/src/autocast_state.cpp.
// The guard saves exactly what it changes (its device type's flag and dtype) and counts the
// nesting depth, so the outermost exit is the one place the weight-cast cache is cleared.
#include "ember/amp/autocast.h"

#include "ember/error.h"

namespace ember::amp {

autocast::autocast(Device device, DType dtype, bool enabled)
    : device_type_(device.type),
      prev_enabled_(ember::autocast::is_enabled(device.type)),
      prev_dtype_(ember::autocast::get_dtype(device.type)) {
  EMBER_CHECK(dtype == DType::bf16 || dtype == DType::f16, DTypeError,
              "[autocast] dtype must be bf16 or f16, got ", dtype);
  ember::autocast::set_dtype(device_type_, dtype);
  ember::autocast::set_enabled(device_type_, enabled);
  ember::autocast::increment_nesting();
}

autocast::autocast(Device device, bool enabled)
    : autocast(device, ember::autocast::get_dtype(device.type), enabled) {}

autocast::~autocast() {
  ember::autocast::set_enabled(device_type_, prev_enabled_);
  ember::autocast::set_dtype(device_type_, prev_dtype_);
  if (ember::autocast::decrement_nesting() == 0) ember::autocast::clear_cache();
}

bool autocast_enabled(DeviceType device_type) { return ember::autocast::is_enabled(device_type); }
bool autocast_enabled() { return ember::autocast::any_enabled(); }
DType autocast_dtype(DeviceType device_type) { return ember::autocast::get_dtype(device_type); }

}  // namespace ember::amp
