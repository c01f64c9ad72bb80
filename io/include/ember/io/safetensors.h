// safetensors: the file format of Hugging Face's `safetensors` library, read and written
// without it, so files move freely between ember, numpy and PyTorch.
//
// Layout: 8-byte little-endian header length N, N bytes of JSON
//   {"__metadata__": {str: str}, name: {"dtype": "F32", "shape": [2, 3], "data_offsets": [b, e]}}
// padded with spaces so the data starts 8-byte aligned, then the raw little-endian bytes of
// every tensor, row-major, at [8 + N + b, 8 + N + e) of the file.
//
// Invariants:
// - Writing: tensors are laid out back to back in StateDict order (non-contiguous and GPU
//   tensors are first copied to a contiguous CPU buffer), and a file only ever appears under
//   its final name complete: it is written to a temporary name in the same folder, fsynced,
//   renamed, and the folder fsynced.
// - Reading: nothing in the file is trusted. Every inconsistency (short file, header length
//   past the end, bad JSON, unknown dtype, byte ranges that do not match the shape, overlap,
//   leave gaps or run past the data, duplicate names) throws ember::IOError naming the file and
//   the problem; no allocation is larger than the file size implies.
// - Loaded tensors come back in the order of their bytes in the file, which is StateDict order
//   for files ember wrote.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "ember/device.h"
#include "ember/dtype.h"
#include "ember/shape.h"
#include "ember/state_dict.h"

namespace ember::io {

// The free-form "__metadata__" string map of a safetensors file.
using Metadata = std::map<std::string, std::string>;

// Writes `tensors` to `path` atomically (see the invariants above). Throws IOError when the
// file cannot be written, ValueError for an undefined tensor or the reserved name
// "__metadata__".
void save_safetensors(const StateDict& tensors, const std::string& path,
                      const Metadata& metadata = {});

// Reads every tensor of `path` onto `device` (via the CPU).
StateDict load_safetensors(const std::string& path, Device device = Device::cpu());

// The "__metadata__" map of `path` (reads and validates only the header).
Metadata load_safetensors_metadata(const std::string& path);

// One tensor's entry in the header.
struct TensorInfo {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  uint64_t begin = 0;  // byte offsets relative to the start of the data area
  uint64_t end = 0;
};

// The validated header of a file: tensors in byte order, metadata, where the data starts.
struct SafetensorsHeader {
  std::vector<TensorInfo> tensors;
  Metadata metadata;
  uint64_t data_start = 0;  // 8 + N
};
SafetensorsHeader read_safetensors_header(const std::string& path);

// Tensors and metadata together.
struct SafetensorsFile {
  StateDict tensors;
  Metadata metadata;
};
SafetensorsFile read_safetensors(const std::string& path, Device device = Device::cpu());

// The same format in memory: the bytes save_safetensors would write, and their parse
// (`name` stands for the file in error messages).
std::string to_safetensors_bytes(const StateDict& tensors, const Metadata& metadata = {});
SafetensorsFile from_safetensors_bytes(std::string_view bytes, Device device = Device::cpu(),
                                       const std::string& name = "<memory>");

// "F32", "BF16", ... and back (IOError for a dtype ember does not have).
const char* safetensors_dtype_name(DType dtype);

}  // namespace ember::io
