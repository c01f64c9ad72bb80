// Device: CPU or CUDA(index). A CPU-only build still knows the CUDA device type, so code can
// name it and get a clear error ("[to] CUDA is not available in this build") at run time.
#pragma once

#include <cstdint>
#include <string>

namespace ember {

enum class DeviceType : uint8_t { CPU, CUDA };

namespace detail {
// Throws ValueError for a device index outside [0, Device::kMaxIndex].
[[noreturn]] void throw_bad_device_index(DeviceType type, int index);
}  // namespace detail

struct Device {
  // The index is stored in an int8_t: a larger one would wrap (cuda(200) would be cuda:-56
  // and index the per-device tables out of bounds), so the constructor refuses it.
  static constexpr int kMaxIndex = 127;

  DeviceType type = DeviceType::CPU;
  int8_t index = 0;

  constexpr Device() = default;
  constexpr Device(DeviceType t, int index = 0) : type(t), index(checked_index(t, index)) {}
  static constexpr Device cpu() { return Device(DeviceType::CPU, 0); }
  static constexpr Device cuda(int index = 0) { return Device(DeviceType::CUDA, index); }
  // Parses "cpu", "cuda", "cuda:1"; throws ValueError otherwise.
  static Device parse(const std::string& s);

  constexpr bool is_cpu() const { return type == DeviceType::CPU; }
  constexpr bool is_cuda() const { return type == DeviceType::CUDA; }
  friend constexpr bool operator==(Device a, Device b) {
    return a.type == b.type && a.index == b.index;
  }
  friend constexpr bool operator!=(Device a, Device b) { return !(a == b); }
  std::string str() const;  // "cpu", "cuda:0"

 private:
  static constexpr int8_t checked_index(DeviceType t, int index) {
    if (index < 0 || index > kMaxIndex) [[unlikely]]
      detail::throw_bad_device_index(t, index);
    return int8_t(index);
  }
};

void str_append(std::string& s, Device d);

}  // namespace ember
