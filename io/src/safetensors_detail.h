// Internal: safetensors writing onto an already open file, so checkpoints (which write into a
// temporary folder that is renamed as a whole) skip the per-file atomic rename.
#pragma once

#include <string_view>

#include "ember/io/safetensors.h"
#include "file_util.h"

namespace ember::io::detail {

// Writes header and data to `f` (not fsynced). ValueError for an undefined tensor or a
// reserved name, before anything is written.
void write_safetensors(File& f, const StateDict& tensors, const Metadata& metadata,
                       std::string_view op);

// Reads a whole file; `op` starts the error messages.
SafetensorsFile read_safetensors(const std::string& path, Device device, std::string_view op);

}  // namespace ember::io::detail
