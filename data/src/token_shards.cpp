// llm.c-format token shards (see token_shards.h for the contract).
//
// Invariants:
// - Each file stays open (one descriptor) and is read with pread, so next() allocates only
//   its B*(T+1) tokens plus the two output tensors.
// - A window is located by binary search in a prefix sum of per-file window counts; the
//   (seed, position, row) -> window map is a pure function (no generator state).
#include "ember/data/token_shards.h"

#include <fcntl.h>
#include <fnmatch.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "ember/error.h"
#include "ember/factory.h"

namespace ember::data {

namespace {

constexpr const char* kTag = "[TokenShards]";

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// A uniform draw in [0, n) for (seed, position, row): three chained mixes, then Lemire's
// multiply-shift (bias below 2^-40 for any n a corpus can have).
int64_t window_draw(uint64_t seed, int64_t position, int64_t row, int64_t n) {
  const uint64_t h = splitmix64(splitmix64(splitmix64(seed) ^ uint64_t(position)) ^ uint64_t(row));
  return int64_t((unsigned __int128)h * uint64_t(n) >> 64);
}

std::vector<std::string> resolve(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<std::string> files;
  if (fs::is_regular_file(path, ec)) return {path};
  if (fs::is_directory(path, ec)) {
    for (const auto& e : fs::directory_iterator(path, ec))
      if (e.path().extension() == ".bin" && e.is_regular_file(ec)) files.push_back(e.path().string());
    if (ec) throw IOError(str(kTag, " ", path, ": cannot list the folder: ", ec.message()));
    if (files.empty()) throw IOError(str(kTag, " ", path, ": no *.bin token shards in this folder"));
    std::sort(files.begin(), files.end());
    return files;
  }
  const fs::path p(path);
  const std::string pattern = p.filename().string();
  if (pattern.find_first_of("*?[") == std::string::npos)
    throw IOError(str(kTag, " ", path, ": no such file or folder (make shards with build/bin/gpt-prepare)"));
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  if (!fs::is_directory(dir, ec))
    throw IOError(str(kTag, " ", path, ": folder ", dir.string(), " does not exist"));
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (fnmatch(pattern.c_str(), e.path().filename().c_str(), 0) == 0 && e.is_regular_file(ec))
      files.push_back(e.path().string());
  if (files.empty()) throw IOError(str(kTag, " ", path, ": no file matches the pattern"));
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

struct TokenShards::File {
  int fd = -1;
  std::string path;
  int64_t tokens = 0;
  File() = default;
  File(File&& o) noexcept : fd(std::exchange(o.fd, -1)), path(std::move(o.path)), tokens(o.tokens) {}
  File& operator=(File&& o) noexcept {
    if (this != &o) {
      if (fd >= 0) ::close(fd);
      fd = std::exchange(o.fd, -1);
      path = std::move(o.path);
      tokens = o.tokens;
    }
    return *this;
  }
  ~File() {
    if (fd >= 0) ::close(fd);
  }
  [[noreturn]] void fail(const std::string& what) const { throw IOError(str(kTag, " ", path, ": ", what)); }
  // Reads exactly n bytes at offset.
  void read_at(void* dst, size_t n, uint64_t offset) const {
    auto* out = static_cast<char*>(dst);
    size_t done = 0;
    while (done < n) {
      const ssize_t got = ::pread(fd, out + done, n - done, off_t(offset + done));
      if (got < 0) {
        if (errno == EINTR) continue;
        fail(str("read error: ", std::strerror(errno)));
      }
      if (got == 0) fail(str("unexpected end of file at byte ", offset + done, " (the file shrank?)"));
      done += size_t(got);
    }
  }
};

TokenShards::TokenShards(const std::string& path, TokenShardsOptions options) : options_(options) {
  EMBER_CHECK(options_.batch_size > 0, ValueError, kTag, " batch_size must be positive, got ",
              options_.batch_size);
  EMBER_CHECK(options_.seq_len > 0, ValueError, kTag, " seq_len must be positive, got ", options_.seq_len);
  EMBER_CHECK(options_.world_size > 0, ValueError, kTag, " world_size must be positive, got ",
              options_.world_size);
  EMBER_CHECK(options_.rank >= 0 && options_.rank < options_.world_size, ValueError, kTag, " rank ",
              options_.rank, " outside [0, world_size = ", options_.world_size, ")");
  EMBER_CHECK(options_.vocab_size >= 0 && options_.vocab_size <= 65536, ValueError, kTag,
              " vocab_size must be in [0, 65536] (uint16 tokens), got ", options_.vocab_size);
  EMBER_CHECK(options_.batch_size <= (int64_t(1) << 24) && options_.seq_len <= (int64_t(1) << 30),
              ValueError, kTag, " batch_size ", options_.batch_size, " x seq_len ", options_.seq_len,
              " is too large");
  const int64_t T = options_.seq_len;
  paths_ = resolve(path);
  start_prefix_.push_back(0);
  seq_prefix_.push_back(0);
  for (const std::string& p : paths_) {
    File f;
    f.path = p;
    f.fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (f.fd < 0) f.fail(str("cannot open: ", std::strerror(errno)));
    struct stat st {};
    if (::fstat(f.fd, &st) != 0) f.fail(str("cannot stat: ", std::strerror(errno)));
    const int64_t size = int64_t(st.st_size);
    constexpr int64_t header_bytes = kTokenShardHeaderInts * 4;
    if (size < header_bytes)
      f.fail(str("truncated: ", size, " bytes, fewer than the ", header_bytes,
                 "-byte header of a token shard"));
    int32_t header[kTokenShardHeaderInts];
    f.read_at(header, sizeof header, 0);
    if (header[0] != kTokenShardMagic)
      f.fail(str("bad magic number ", header[0], ", expected ", kTokenShardMagic,
                 " (not an llm.c token shard)"));
    if (header[1] != kTokenShardVersion)
      f.fail(str("unsupported version ", header[1], ", expected ", kTokenShardVersion,
                 " (uint16 tokens)"));
    const int64_t count = header[2];
    if (count < 0) f.fail(str("negative token count ", count, " in the header"));
    const int64_t want = header_bytes + 2 * count;
    if (size != want)
      f.fail(str("the header says ", count, " tokens (", want, " bytes) but the file has ", size,
                 " bytes", size < want ? " (truncated)" : ""));
    if (count < T + 1)
      f.fail(str("too short: ", count, " tokens, fewer than one window of seq_len + 1 = ", T + 1));
    f.tokens = count;
    num_tokens_ += count;
    start_prefix_.push_back(start_prefix_.back() + (count - T));
    seq_prefix_.push_back(seq_prefix_.back() + (count - 1) / T);
    files_.push_back(std::move(f));
  }
  buffer_.resize(size_t(options_.batch_size * (T + 1)));
}

TokenShards::TokenShards(TokenShards&&) noexcept = default;
TokenShards& TokenShards::operator=(TokenShards&&) noexcept = default;
TokenShards::~TokenShards() = default;

std::pair<Tensor, Tensor> TokenShards::next() {
  const int64_t B = options_.batch_size, T = options_.seq_len;
  const int64_t rows_per_step = B * options_.world_size;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t row = int64_t(options_.rank) * B + b;
    size_t file = 0;
    int64_t offset = 0;
    if (options_.shuffle) {
      const int64_t u = window_draw(options_.seed, position_, row, start_prefix_.back());
      file = size_t(std::upper_bound(start_prefix_.begin(), start_prefix_.end(), u) - start_prefix_.begin()) - 1;
      offset = u - start_prefix_[file];
    } else {
      const int64_t total = seq_prefix_.back();
      // (position * rows_per_step + row) mod total without overflow for any position.
      const int64_t k = int64_t(((unsigned __int128)uint64_t(position_) * uint64_t(rows_per_step) +
                                 uint64_t(row)) % uint64_t(total));
      file = size_t(std::upper_bound(seq_prefix_.begin(), seq_prefix_.end(), k) - seq_prefix_.begin()) - 1;
      offset = (k - seq_prefix_[file]) * T;
    }
    uint16_t* dst = buffer_.data() + b * (T + 1);
    files_[file].read_at(dst, size_t(T + 1) * 2, uint64_t(kTokenShardHeaderInts * 4 + offset * 2));
    if (options_.vocab_size > 0) {
      for (int64_t t = 0; t <= T; ++t)
        if (dst[t] >= options_.vocab_size)
          files_[file].fail(str("token ", dst[t], " at index ", offset + t, " is outside the vocabulary of ",
                                options_.vocab_size, " tokens"));
    }
  }
  Tensor x = empty({B, T}, DType::i64), y = empty({B, T}, DType::i64);
  int64_t* px = x.data_ptr<int64_t>();
  int64_t* py = y.data_ptr<int64_t>();
  for (int64_t b = 0; b < B; ++b) {
    const uint16_t* src = buffer_.data() + b * (T + 1);
    for (int64_t t = 0; t < T; ++t) {
      px[b * T + t] = src[t];
      py[b * T + t] = src[t + 1];
    }
  }
  ++position_;
  return {std::move(x), std::move(y)};
}

int64_t TokenShards::num_tokens() const { return num_tokens_; }
int64_t TokenShards::position() const { return position_; }
void TokenShards::set_position(int64_t p) {
  EMBER_CHECK(p >= 0 && p <= (int64_t(1) << 62), ValueError, kTag,
              " set_position: position must be in [0, 2^62], got ", p);
  position_ = p;
}
void TokenShards::reset() { position_ = 0; }
const std::vector<std::string>& TokenShards::files() const { return paths_; }
int64_t TokenShards::windows_per_epoch() const { return seq_prefix_.back(); }
int64_t TokenShards::batches_per_epoch() const {
  const int64_t rows = options_.batch_size * options_.world_size;
  return (seq_prefix_.back() + rows - 1) / rows;
}

}  // namespace ember::data
