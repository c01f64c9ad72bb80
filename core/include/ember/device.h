// Device: CPU or CUDA(index). A CPU-only build still knows the CUDA device type, so code can
// name it and get a clear error ("[to] CUDA is not available in this build") at run time.
#pragma once

#include <cstdint>
#include <string>

namespace ember {

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int8_t index = 0;

  constexpr Device() = default;
  constexpr Device(DeviceType t, int index = 0) : type(t), index(int8_t(index)) {}
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
};

void str_append(std::string& s, Device d);

}  // namespace ember
