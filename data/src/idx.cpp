// IDX reader (LeCun's format: 2 zero bytes, a type code, the rank, big-endian u32 dims, then
// the row-major payload), plain or gzip-compressed.
//
// Invariants:
// - Only unsigned-byte arrays (type 0x08) are read; the payload must have exactly
//   product(dims) bytes: a shorter file is "truncated", a longer one a "size mismatch".
// - The payload is allocated only after the header was checked against the file size (for
//   gzip: against the most a deflate stream of that size can expand to, 1032:1), so a
//   corrupt header cannot make the reader allocate more than the file implies.
// - Every error is an IOError "<tag> <path>: <what is wrong>".
#include <zlib.h>

#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "ember/data/mnist.h"

namespace ember::data {

namespace {
constexpr uint32_t kImagesMagic = 2051, kLabelsMagic = 2049;
// Deflate's best case is 1032:1; a margin covers the gzip header of a tiny file.
constexpr uint64_t kMaxDeflateRatio = 1032, kGzipSlack = 1024;

uint32_t big_endian_u32(const uint8_t* p) {
  return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | uint32_t(p[3]);
}

bool ends_with(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// Sequential byte source over a plain or a gzip file; `size_text` says how big the source is
// in error messages ("the file has 1000 bytes" / "the file decompresses to 1000 bytes").
class Source {
 public:
  Source(const std::string& path, const std::string& tag) : path_(path), tag_(tag) {
    std::error_code ec;
    file_size_ = std::filesystem::file_size(path, ec);
    if (ec) fail("cannot open: ", ec.message());
    gzip_ = ends_with(path, ".gz");
    if (gzip_) {
      gz_ = gzopen(path.c_str(), "rb");
      if (!gz_) fail("cannot open: ", errno ? std::strerror(errno) : "gzopen failed");
      gzbuffer(gz_, 1 << 16);
    } else {
      file_ = std::fopen(path.c_str(), "rb");
      if (!file_) fail("cannot open: ", std::strerror(errno));
    }
  }
  ~Source() {
    if (gz_) gzclose(gz_);
    if (file_) std::fclose(file_);
  }
  Source(const Source&) = delete;
  Source& operator=(const Source&) = delete;

  bool gzip() const { return gzip_; }
  uint64_t file_size() const { return file_size_; }

  // Reads up to n bytes; returns how many were read (fewer only at the end of the data).
  uint64_t read(void* dst, uint64_t n) {
    auto* out = static_cast<char*>(dst);
    uint64_t done = 0;
    while (done < n) {
      if (gzip_) {
        const unsigned chunk = unsigned(std::min<uint64_t>(n - done, INT_MAX));
        const int got = gzread(gz_, out + done, chunk);
        if (got < 0) {
          int code = 0;
          const char* msg = gzerror(gz_, &code);
          fail("corrupt gzip data: ", msg ? msg : "unknown zlib error");
        }
        if (got == 0) {
          // The end of the data, or a damaged stream that zlib reports only through gzerror.
          int code = Z_OK;
          const char* msg = gzerror(gz_, &code);
          if (code != Z_OK) fail("corrupt gzip data: ", msg ? msg : "unknown zlib error");
          break;
        }
        done += uint64_t(got);
      } else {
        const size_t got = std::fread(out + done, 1, size_t(n - done), file_);
        if (got == 0) {
          if (std::ferror(file_)) fail("read error: ", std::strerror(errno));
          break;
        }
        done += got;
      }
    }
    return done;
  }

  // "the file has N bytes" or "the file decompresses to N bytes" (total bytes available).
  std::string size_text(uint64_t total, bool more = false) const {
    return str(gzip_ ? "the file decompresses to " : "the file has ", more ? "more than " : "",
               total, " bytes");
  }

  template <class... Args>
  [[noreturn]] void fail(const Args&... args) const {
    throw IOError(str(tag_, " ", path_, ": ", args...));
  }

 private:
  std::string path_, tag_;
  uint64_t file_size_ = 0;
  bool gzip_ = false;
  gzFile gz_ = nullptr;
  std::FILE* file_ = nullptr;
};

// What the header claims, in words: "60000 images of 28x28", "60000 labels", "[2, 3] bytes".
std::string describe(uint32_t magic, const std::vector<int64_t>& dims) {
  if (magic == kImagesMagic && dims.size() == 3)
    return str(dims[0], " images of ", dims[1], "x", dims[2]);
  if (magic == kLabelsMagic && dims.size() == 1) return str(dims[0], " labels");
  std::string s = "an array of shape [";
  for (size_t i = 0; i < dims.size(); ++i) s += str(i ? ", " : "", dims[i]);
  return s + "]";
}

std::string expected_text(uint32_t magic) {
  if (magic == kImagesMagic) return "2051, an IDX file of u8 images";
  if (magic == kLabelsMagic) return "2049, an IDX file of u8 labels";
  return str(magic);
}
}  // namespace

IdxArray read_idx(const std::string& path, uint32_t expected_magic, const std::string& tag) {
  Source src(path, tag);
  uint8_t head[4];
  const uint64_t got_magic = src.read(head, 4);
  if (got_magic < 4) {
    if (got_magic == 0) src.fail("empty file: expected an IDX header");
    src.fail("truncated: ", src.size_text(got_magic), ", too few for an IDX header");
  }
  const uint32_t magic = big_endian_u32(head);
  if (expected_magic != 0 && magic != expected_magic) {
    const char* hint = "";
    if (head[0] == 0x1f && head[1] == 0x8b) hint = " (the file is gzip-compressed: name it *.gz)";
    else if (magic == kImagesMagic || magic == kLabelsMagic)
      hint = magic == kImagesMagic ? " (this is an image file)" : " (this is a label file)";
    src.fail("bad magic number ", magic, ", expected ", expected_text(expected_magic), hint);
  }
  if (head[0] != 0 || head[1] != 0 || head[2] != 0x08 || head[3] == 0)
    src.fail("bad magic number ", magic, ": not an IDX file of unsigned bytes");

  const int rank = head[3];
  std::vector<uint8_t> dim_bytes(size_t(rank) * 4);
  const uint64_t header_bytes = 4 + uint64_t(rank) * 4;
  const uint64_t got_dims = src.read(dim_bytes.data(), dim_bytes.size());
  if (got_dims < dim_bytes.size())
    src.fail("truncated: an IDX header of rank ", rank, " needs ", header_bytes, " bytes but ",
             src.size_text(4 + got_dims));
  IdxArray out;
  out.dims.resize(size_t(rank));
  uint64_t payload = 1;
  bool overflow = false;
  for (int i = 0; i < rank; ++i) {
    out.dims[size_t(i)] = int64_t(big_endian_u32(&dim_bytes[size_t(i) * 4]));
    overflow |= __builtin_mul_overflow(payload, uint64_t(out.dims[size_t(i)]), &payload);
  }
  overflow |= payload > UINT64_MAX - header_bytes;
  const std::string claim =
      overflow ? str("header says ", describe(magic, out.dims), " (more than 2^64 bytes)")
               : str("header says ", describe(magic, out.dims), " (", header_bytes + payload,
                     " bytes)");

  // The bound on what this file can hold, checked before allocating anything.
  if (!src.gzip()) {
    const uint64_t have = src.file_size();
    if (overflow || header_bytes + payload > have)
      src.fail("truncated: ", claim, " but ", src.size_text(have));
    if (header_bytes + payload < have)
      src.fail("size mismatch: ", claim, " but ", src.size_text(have));
  } else {
    const uint64_t most = src.file_size() * kMaxDeflateRatio + kGzipSlack;
    if (overflow || payload > most)
      src.fail("truncated: ", claim, " but a gzip file of ", src.file_size(),
               " bytes cannot decompress to more than ", most, " bytes");
  }

  out.data.resize(size_t(payload));
  const uint64_t got = src.read(out.data.data(), payload);
  if (got < payload) src.fail("truncated: ", claim, " but ", src.size_text(header_bytes + got));
  uint8_t extra;
  if (src.read(&extra, 1) != 0)
    src.fail("size mismatch: ", claim, " but ", src.size_text(header_bytes + payload, true));
  return out;
}

}  // namespace ember::data
