// POSIX file helpers for io/ (internal): whole reads/writes with EINTR and short transfers
// handled, fsync of files and folders, atomic replace. Every failure throws IOError whose
// message starts with the caller's op name and names the path and strerror(errno), so a user
// sees "[save_checkpoint] cannot create folder /ckpt/x: Permission denied".
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace ember::io::detail {

[[noreturn]] void throw_errno(std::string_view op, const std::string& path, std::string_view what,
                              int err);

// An open file descriptor, closed by the destructor (errors on that close are ignored: callers
// that care call close() themselves).
class File {
 public:
  File() = default;
  File(int fd, std::string path, std::string op) : fd_(fd), path_(std::move(path)), op_(std::move(op)) {}
  File(File&& o) noexcept { *this = std::move(o); }
  File& operator=(File&& o) noexcept;
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  ~File();

  // Opens for reading; IOError when missing, unreadable or not a regular file.
  static File open_read(const std::string& path, std::string op);
  // Creates a new file (fails if it exists), mode 0644 minus umask.
  static File create(const std::string& path, std::string op);

  uint64_t size() const;
  // Reads exactly n bytes at `offset`; IOError on a short read (the file shrank).
  void read_at(void* dst, size_t n, uint64_t offset) const;
  void write_all(const void* src, size_t n);
  void sync();
  void close();
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
  std::string op_;
};

// fsync of a folder, which makes renames and creations inside it durable.
void sync_dir(const std::string& dir, std::string_view op);

// The folder holding `path` ("." for a bare name).
std::string parent_dir(const std::string& path);
// `name` inside folder `dir` (no doubled slash; a bare name for an empty dir).
std::string join_path(const std::string& dir, std::string_view name);
// A name unique to this process and call: "<pid>-<counter>-<random>".
std::string unique_suffix();

// Writes `path` atomically: `write(file)` fills `<dir>/.<name>.tmp-<unique>`, which is then
// fsynced, renamed over `path` and the folder fsynced. On failure the temporary file is removed
// and `path` is untouched.
void write_file_atomic(const std::string& path, std::string_view op,
                       const std::function<void(File&)>& write);

}  // namespace ember::io::detail
