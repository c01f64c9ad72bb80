// The fuzz harnesses, header-only so that the libFuzzer targets (fuzz_*.cpp, one line each)
// and the CI replay of kept inputs (tests/io/test_fuzz_regressions.cpp) run the same code.
//
// Contract checked for every input: the loader either loads the file or throws
// ember::IOError. Each run_* function swallows IOError and lets anything else escape (another
// exception type aborts libFuzzer and fails the replay test; sanitizer reports and
// allocations beyond -rss_limit_mb are crashes too).
#pragma once
#include <unistd.h>
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "ember/data/mnist.h"
#include "ember/error.h"
#include "ember/io/checkpoint.h"
#include "ember/io/safetensors.h"

namespace ember_fuzz {

// Separates the files packed into one input (the checkpoint target's files, MNIST's pair).
inline constexpr std::string_view kSeparator = "\n@@EMBER-FILE@@\n";

// A folder under $TMPDIR (or /tmp) unique to this process, (re)created on every call.
inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    return std::string(tmp && *tmp ? tmp : "/tmp") + "/ember_fuzz_" + std::to_string(getpid());
  }();
  std::filesystem::create_directories(dir);
  return dir;
}

inline void write_file(const std::string& path, std::string_view bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw std::runtime_error("fuzz harness: cannot write " + path);
  const bool ok = bytes.empty() || std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  std::fclose(f);
  if (!ok) throw std::runtime_error("fuzz harness: short write " + path);
}

inline std::vector<std::string_view> split(std::string_view data) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  for (;;) {
    const size_t at = data.find(kSeparator, start);
    if (at == std::string_view::npos) {
      parts.push_back(data.substr(start));
      return parts;
    }
    parts.push_back(data.substr(start, at - start));
    start = at + kSeparator.size();
  }
}

inline std::string gzip(std::string_view bytes) {
  z_stream z{};
  deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);  // gzip
  std::string out(deflateBound(&z, uLong(bytes.size())) + 32, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  z.avail_in = uInt(bytes.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = uInt(out.size());
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// Reads every byte of every loaded tensor (ASan sees any view past its storage).
inline unsigned touch(const ember::StateDict& tensors) {
  unsigned acc = 0;
  for (const auto& [name, t] : tensors) {
    const ember::Tensor c = t.contiguous();
    const auto* p = static_cast<const unsigned char*>(c.data_ptr());
    const size_t n = size_t(c.numel()) * c.element_size();
    for (size_t i = 0; i < n; ++i) acc += p[i];
  }
  return acc;
}

// ---- fuzz_idx: data::read_idx and data::MNIST ----
// The first byte picks the mode, the rest is the payload:
//   bits 0-1: 0 plain file, 1 "*.gz" holding the raw bytes, 2 "*.gz" holding the payload
//             gzip-compressed here (so mutations reach past zlib's checks), 3 MNIST: the
//             payload split at kSeparator into the image and label files, then MNIST(root)
//             and get/get_batch on what loaded
//   bits 2-3: read_idx's expected magic: 0 (any), 2051, 2049, 0
inline void run_idx(const uint8_t* data, size_t size) {
  if (size < 1) return;
  const uint8_t mode = data[0];
  const std::string_view payload(reinterpret_cast<const char*>(data + 1), size - 1);
  const uint32_t magics[4] = {0, 2051, 2049, 0};
  const std::string& dir = scratch_dir();
  try {
    switch (mode & 3) {
      case 0:
        write_file(dir + "/input.idx", payload);
        (void)ember::data::read_idx(dir + "/input.idx", magics[(mode >> 2) & 3]);
        break;
      case 1:
        write_file(dir + "/input.idx.gz", payload);
        (void)ember::data::read_idx(dir + "/input.idx.gz", magics[(mode >> 2) & 3]);
        break;
      case 2:
        write_file(dir + "/input.idx.gz", gzip(payload));
        (void)ember::data::read_idx(dir + "/input.idx.gz", magics[(mode >> 2) & 3]);
        break;
      default: {
        const std::string root = dir + "/mnist";
        const auto parts = split(payload);
        std::filesystem::remove_all(root);
        std::filesystem::create_directories(root);
        write_file(root + "/train-images-idx3-ubyte", parts[0]);
        if (parts.size() > 1) write_file(root + "/train-labels-idx1-ubyte", parts[1]);
        ember::data::MNIST ds(root, ember::data::Split::train);
        if (ds.size() > 0) {
          (void)ds.get(0);
          (void)ds.get(ds.size() - 1);
          std::vector<int64_t> idx;
          for (int64_t i = 0; i < ds.size() && i < 8; ++i) idx.push_back(i);
          (void)ds.get_batch(idx);
        }
        break;
      }
    }
  } catch (const ember::IOError&) {
  }
}

// ---- fuzz_safetensors: the safetensors reader ----
// The input is a whole file, parsed in memory (io::from_safetensors_bytes); every 4th input
// (size % 4 == 0) is also written to disk and read through the file path
// (load_safetensors_metadata, read_safetensors), which has its own size checks.
inline void run_safetensors(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    (void)touch(ember::io::from_safetensors_bytes(bytes).tensors);
  } catch (const ember::IOError&) {
  }
  if (size % 4 != 0) return;
  const std::string path = scratch_dir() + "/input.safetensors";
  write_file(path, bytes);
  try {
    (void)ember::io::load_safetensors_metadata(path);
  } catch (const ember::IOError&) {
  }
  try {
    (void)touch(ember::io::read_safetensors(path).tensors);
  } catch (const ember::IOError&) {
  }
}

// ---- fuzz_checkpoint: the checkpoint loader ----
// The input is split at kSeparator into up to five files of one checkpoint folder, in order
//   step-00000001/meta.safetensors, model.safetensors, optimizer.safetensors,
//   scheduler.safetensors, and dir/latest
// (a missing part leaves that file missing); then io::load_checkpoint(folder) and
// io::load_latest_checkpoint(dir).
inline void run_checkpoint(const uint8_t* data, size_t size) {
  namespace fs = std::filesystem;
  const auto parts = split(std::string_view(reinterpret_cast<const char*>(data), size));
  const std::string dir = scratch_dir() + "/ckpt";
  const std::string step = dir + "/step-00000001";
  fs::remove_all(dir);
  fs::create_directories(step);
  const char* names[] = {"meta.safetensors", "model.safetensors", "optimizer.safetensors",
                         "scheduler.safetensors"};
  for (size_t i = 0; i < parts.size() && i < 4; ++i) write_file(step + "/" + names[i], parts[i]);
  if (parts.size() > 4) write_file(dir + "/latest", parts[4]);
  try {
    (void)touch(ember::io::load_checkpoint(step).model);
  } catch (const ember::IOError&) {
  }
  try {
    std::vector<std::string> notes;
    (void)ember::io::load_latest_checkpoint(dir, ember::Device::cpu(), &notes);
  } catch (const ember::IOError&) {
  }
}

}  // namespace ember_fuzz
