// safetensors reading and writing; the format and invariants are in ember/io/safetensors.h.
//
// Reading never trusts the file: the header length is checked against the file size before
// anything is allocated, the JSON is parsed with duplicate-key detection (nlohmann would keep
// the last value silently), every byte range is checked against its shape, and the ranges
// sorted by offset must tile the data area exactly (the rule of the reference Rust
// implementation: no overlap, no gap, no trailing bytes). Tensor bytes are then read straight
// into freshly allocated tensors.
#include "ember/io/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <set>
#include <vector>

#include <nlohmann/json.hpp>

#include "ember/error.h"
#include "ember/tensor.h"
#include "file_util.h"
#include "safetensors_detail.h"

namespace ember::io {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; a big-endian host would need byte swaps");

namespace {

using Json = nlohmann::ordered_json;  // keeps header order (ties between empty tensors)

// The reference implementation rejects headers above 100 MB; so do we (compatibility, and a
// bound on what a hostile file can make us parse).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct DTypeName {
  DType dtype;
  const char* name;
};
constexpr DTypeName kDTypeNames[] = {
    {DType::f32, "F32"}, {DType::f64, "F64"}, {DType::f16, "F16"}, {DType::bf16, "BF16"},
    {DType::i64, "I64"}, {DType::i32, "I32"}, {DType::u8, "U8"},   {DType::b8, "BOOL"},
};

bool dtype_from_name(const std::string& name, DType* out) {
  for (const auto& d : kDTypeNames)
    if (name == d.name) {
      *out = d.dtype;
      return true;
    }
  return false;
}

uint64_t load_le64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

void store_le64(char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = char((v >> (8 * i)) & 0xff);
}

// A tensor's bytes as a contiguous CPU tensor (no copy when it already is one). Detached so
// that saving a parameter records nothing in the graph.
Tensor host_contiguous(const Tensor& t) {
  Tensor h = t.detach();
  if (!h.is_cpu()) h = h.to(Device::cpu());
  if (!h.is_contiguous()) h = h.contiguous();
  return h;
}

uint64_t nbytes_of(const Tensor& t) { return uint64_t(t.numel()) * itemsize(t.dtype()); }

// ---- writing ----

// The 8-byte length and the padded JSON header for `tensors` laid out back to back.
std::string build_header(const StateDict& tensors, const Metadata& metadata, std::string_view op) {
  Json h = Json::object();
  if (!metadata.empty()) {
    Json m = Json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    h["__metadata__"] = std::move(m);
  }
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    EMBER_CHECK(t.defined(), ValueError, op, " tensor '", name, "' is undefined");
    EMBER_CHECK(name != "__metadata__", ValueError, op,
                " '__metadata__' is reserved by the format and cannot name a tensor");
    Json shape = Json::array();
    for (int64_t s : t.sizes()) shape.push_back(s);
    uint64_t end = offset + nbytes_of(t);
    h[name] = Json{{"dtype", safetensors_dtype_name(t.dtype())},
                   {"shape", std::move(shape)},
                   {"data_offsets", Json::array({offset, end})}};
    offset = end;
  }
  std::string text;
  try {
    text = h.dump();
  } catch (const Json::type_error& e) {  // names and metadata must be valid UTF-8
    throw ValueError(str(op, " cannot encode the header: ", e.what()));
  }
  // Pad so the data area starts 8-byte aligned (readers may map it and view it in place).
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  store_le64(out.data(), text.size());
  out += text;
  return out;
}

// Appends each tensor's bytes through `sink(ptr, n)`, one host copy at a time (a model on the
// GPU is never staged whole in host memory).
template <class Sink>
void write_data(const StateDict& tensors, Sink&& sink) {
  for (const auto& [name, t] : tensors) {
    if (t.numel() == 0) continue;
    Tensor h = host_contiguous(t);
    sink(h.data_ptr(), nbytes_of(h));
  }
}

// ---- reading ----

[[noreturn]] void fail(std::string_view op, const std::string& name, const std::string& what) {
  throw IOError(str(op, " ", name, ": ", what));
}

uint64_t as_offset(const Json& v, std::string_view op, const std::string& file,
                   const std::string& tensor, const char* what) {
  // nlohmann stores non-negative integers as unsigned, negative ones as signed.
  if (!v.is_number_unsigned())
    fail(op, file, str("tensor '", tensor, "': ", what, " must be a non-negative integer, got ", v.dump()));
  return v.get<uint64_t>();
}

// Parses and validates the JSON header. `data_size` is the number of bytes after the header.
SafetensorsHeader parse_header(std::string_view op, const std::string& file,
                               std::string_view text, uint64_t data_start, uint64_t data_size) {
  // Duplicate keys: one set of seen keys per open JSON object.
  std::vector<std::set<std::string>> seen;
  std::string duplicate;
  Json::parser_callback_t on_event = [&](int, Json::parse_event_t event, Json& parsed) {
    if (event == Json::parse_event_t::object_start) {
      seen.emplace_back();
    } else if (event == Json::parse_event_t::object_end) {
      if (!seen.empty()) seen.pop_back();
    } else if (event == Json::parse_event_t::key && !seen.empty() && duplicate.empty()) {
      const std::string& key = parsed.get_ref<const std::string&>();
      if (!seen.back().insert(key).second) duplicate = key;
    }
    return true;
  };
  Json h;
  try {
    h = Json::parse(text.begin(), text.end(), on_event);
  } catch (const Json::exception& e) {
    fail(op, file, str("header is not valid JSON (", e.what(), ")"));
  }
  if (!duplicate.empty()) fail(op, file, str("header names '", duplicate, "' twice"));
  if (!h.is_object()) fail(op, file, "header is not a JSON object");

  SafetensorsHeader out;
  out.data_start = data_start;
  for (const auto& [name, entry] : h.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) fail(op, file, "__metadata__ is not an object of strings");
      for (const auto& [k, v] : entry.items()) {
        if (!v.is_string()) fail(op, file, str("__metadata__ value of '", k, "' is not a string"));
        out.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    if (!entry.is_object()) fail(op, file, str("entry of tensor '", name, "' is not an object"));
    auto dt = entry.find("dtype");
    auto sh = entry.find("shape");
    auto off = entry.find("data_offsets");
    if (dt == entry.end() || sh == entry.end() || off == entry.end())
      fail(op, file, str("tensor '", name, "' lacks one of dtype, shape, data_offsets"));
    TensorInfo info;
    info.name = name;
    if (!dt->is_string()) fail(op, file, str("tensor '", name, "': dtype is not a string"));
    if (!dtype_from_name(dt->get<std::string>(), &info.dtype))
      fail(op, file, str("tensor '", name, "' has unsupported dtype '", dt->get<std::string>(),
                         "' (ember reads F32, F64, F16, BF16, I64, I32, U8, BOOL)"));
    if (!sh->is_array()) fail(op, file, str("tensor '", name, "': shape is not an array"));
    uint64_t numel = 1;
    bool overflow = false;
    for (const auto& d : *sh) {
      uint64_t n = as_offset(d, op, file, name, "every dimension");
      if (n > uint64_t(INT64_MAX)) overflow = true;
      info.shape.push_back(int64_t(n));
      overflow |= __builtin_mul_overflow(numel, n, &numel);
    }
    uint64_t nbytes = 0;
    overflow |= __builtin_mul_overflow(numel, uint64_t(itemsize(info.dtype)), &nbytes);
    if (overflow || numel > uint64_t(INT64_MAX))
      fail(op, file, str("tensor '", name, "' has an impossibly large shape ", sh->dump()));
    if (!off->is_array() || off->size() != 2)
      fail(op, file, str("tensor '", name, "': data_offsets is not [begin, end]"));
    info.begin = as_offset((*off)[0], op, file, name, "data_offsets[0]");
    info.end = as_offset((*off)[1], op, file, name, "data_offsets[1]");
    if (info.end < info.begin)
      fail(op, file, str("tensor '", name, "': data_offsets [", info.begin, ", ", info.end,
                         "] end before they begin"));
    if (info.end - info.begin != nbytes)
      fail(op, file, str("tensor '", name, "': data_offsets [", info.begin, ", ", info.end,
                         "] hold ", info.end - info.begin, " bytes but shape ", sh->dump(), " of ",
                         dt->get<std::string>(), " needs ", nbytes));
    if (info.end > data_size)
      fail(op, file, str("tensor '", name, "': data_offsets [", info.begin, ", ", info.end,
                         "] run past the data area of ", data_size, " bytes (truncated file?)"));
    out.tensors.push_back(std::move(info));
  }

  // Byte order; stable, so empty tensors at one offset keep their header order.
  std::stable_sort(out.tensors.begin(), out.tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t covered = 0;
  const TensorInfo* prev = nullptr;
  for (const auto& t : out.tensors) {
    if (t.begin < covered)
      fail(op, file, str("tensors '", prev->name, "' [", prev->begin, ", ", prev->end, ") and '",
                         t.name, "' [", t.begin, ", ", t.end, ") overlap"));
    if (t.begin > covered)
      fail(op, file, str("bytes [", covered, ", ", t.begin, ") of the data area belong to no tensor"));
    covered = t.end;
    prev = &t;
  }
  if (covered != data_size)
    fail(op, file, str("the data area has ", data_size, " bytes but the tensors cover ", covered));
  return out;
}

// The validated header of a file whose first bytes are readable through `read(dst, n, offset)`.
template <class Read>
SafetensorsHeader read_header(std::string_view op, const std::string& name, uint64_t size, Read&& read) {
  if (size < 8)
    fail(op, name, str("file is ", size, " bytes, too short for the 8-byte header length"));
  unsigned char len_bytes[8];
  read(len_bytes, 8, 0);
  uint64_t n = load_le64(len_bytes);
  if (n > size - 8)
    fail(op, name, str("header length ", n, " exceeds the ", size - 8,
                       " bytes that follow it (truncated or not a safetensors file)"));
  if (n > kMaxHeaderBytes)
    fail(op, name, str("header length ", n, " exceeds the limit of ", kMaxHeaderBytes, " bytes"));
  std::string text(n, '\0');
  read(text.data(), n, 8);
  return parse_header(op, name, text, 8 + n, size - 8 - n);
}

// Allocates each tensor on the CPU, fills it with `read`, moves it to `device`.
template <class Read>
SafetensorsFile read_tensors(const SafetensorsHeader& h, Device device, Read&& read) {
  SafetensorsFile out;
  out.metadata = h.metadata;
  for (const auto& info : h.tensors) {
    Tensor t = ember::detail::make_tensor(info.shape, info.dtype, Device::cpu());
    uint64_t n = info.end - info.begin;
    if (n > 0) read(t.data_ptr(), n, h.data_start + info.begin);
    if (info.dtype == DType::b8) {
      // A C++ bool must hold 0 or 1; other writers may store any nonzero byte for true.
      auto* p = static_cast<unsigned char*>(t.data_ptr());
      for (uint64_t i = 0; i < n; ++i) p[i] = p[i] != 0;
    }
    if (device != Device::cpu()) t = t.to(device);
    out.tensors.insert(info.name, std::move(t));
  }
  return out;
}

}  // namespace

const char* safetensors_dtype_name(DType dtype) {
  for (const auto& d : kDTypeNames)
    if (d.dtype == dtype) return d.name;
  throw IOError(str("[safetensors] dtype ", dtype, " has no safetensors name"));
}

// ---- public API ----

namespace detail {

void write_safetensors(File& f, const StateDict& tensors, const Metadata& metadata,
                       std::string_view op) {
  std::string header = build_header(tensors, metadata, op);
  f.write_all(header.data(), header.size());
  write_data(tensors, [&](const void* p, size_t n) { f.write_all(p, n); });
}

SafetensorsFile read_safetensors(const std::string& path, Device device, std::string_view op) {
  File f = File::open_read(path, std::string(op));
  auto read = [&](void* dst, size_t n, uint64_t offset) { f.read_at(dst, n, offset); };
  SafetensorsHeader h = read_header(op, path, f.size(), read);
  return read_tensors(h, device, read);
}

}  // namespace detail

void save_safetensors(const StateDict& tensors, const std::string& path, const Metadata& metadata) {
  constexpr std::string_view op = "[save_safetensors]";
  // Build the header first so that argument errors throw before any file is created.
  std::string header = build_header(tensors, metadata, op);
  detail::write_file_atomic(path, op, [&](detail::File& f) {
    f.write_all(header.data(), header.size());
    write_data(tensors, [&](const void* p, size_t n) { f.write_all(p, n); });
  });
}

SafetensorsFile read_safetensors(const std::string& path, Device device) {
  return detail::read_safetensors(path, device, "[load_safetensors]");
}

StateDict load_safetensors(const std::string& path, Device device) {
  return read_safetensors(path, device).tensors;
}

SafetensorsHeader read_safetensors_header(const std::string& path) {
  constexpr std::string_view op = "[load_safetensors]";
  detail::File f = detail::File::open_read(path, std::string(op));
  return read_header(op, path, f.size(),
                     [&](void* dst, size_t n, uint64_t offset) { f.read_at(dst, n, offset); });
}

Metadata load_safetensors_metadata(const std::string& path) {
  return read_safetensors_header(path).metadata;
}

std::string to_safetensors_bytes(const StateDict& tensors, const Metadata& metadata) {
  std::string out = build_header(tensors, metadata, "[save_safetensors]");
  write_data(tensors, [&](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); });
  return out;
}

SafetensorsFile from_safetensors_bytes(std::string_view bytes, Device device, const std::string& name) {
  constexpr std::string_view op = "[load_safetensors]";
  // Bounds were validated by read_header/parse_header before any read.
  auto read = [&](void* dst, size_t n, uint64_t offset) { std::memcpy(dst, bytes.data() + offset, n); };
  SafetensorsHeader h = read_header(op, name, bytes.size(), read);
  return read_tensors(h, device, read);
}

}  // namespace ember::io
