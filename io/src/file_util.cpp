// POSIX file helpers; see file_util.h. Reads and writes loop because read/write/pread may
// transfer less than asked (signals, > 2 GiB requests) without it being an error.
#include "file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>

#include "ember/error.h"

namespace ember::io::detail {

void throw_errno(std::string_view op, const std::string& path, std::string_view what, int err) {
  throw IOError(str(op, " ", path, ": ", what, ": ", std::strerror(err)));
}

File& File::operator=(File&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    path_ = std::move(o.path_);
    op_ = std::move(o.op_);
    o.fd_ = -1;
  }
  return *this;
}

File::~File() {
  if (fd_ >= 0) ::close(fd_);
}

File File::open_read(const std::string& path, std::string op) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) throw_errno(op, path, "cannot open for reading", errno);
  File f(fd, path, std::move(op));
  struct stat st;
  if (::fstat(fd, &st) != 0) throw_errno(f.op_, path, "cannot stat", errno);
  EMBER_CHECK(S_ISREG(st.st_mode), IOError, f.op_, " ", path, ": not a regular file");
  return f;
}

File File::create(const std::string& path, std::string op) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) throw_errno(op, path, "cannot create file", errno);
  return File(fd, path, std::move(op));
}

uint64_t File::size() const {
  struct stat st;
  if (::fstat(fd_, &st) != 0) throw_errno(op_, path_, "cannot stat", errno);
  return uint64_t(st.st_size);
}

void File::read_at(void* dst, size_t n, uint64_t offset) const {
  char* p = static_cast<char*>(dst);
  while (n > 0) {
    // Linux transfers at most 0x7ffff000 bytes per call; ask for no more.
    size_t chunk = std::min<size_t>(n, size_t(1) << 30);
    ssize_t got = ::pread(fd_, p, chunk, off_t(offset));
    if (got < 0) {
      if (errno == EINTR) continue;
      throw_errno(op_, path_, "read failed", errno);
    }
    EMBER_CHECK(got > 0, IOError, op_, " ", path_, ": unexpected end of file at byte ", offset,
                " (the file was truncated while being read)");
    p += got;
    n -= size_t(got);
    offset += uint64_t(got);
  }
}

void File::write_all(const void* src, size_t n) {
  const char* p = static_cast<const char*>(src);
  while (n > 0) {
    size_t chunk = std::min<size_t>(n, size_t(1) << 30);
    ssize_t put = ::write(fd_, p, chunk);
    if (put < 0) {
      if (errno == EINTR) continue;
      throw_errno(op_, path_, "write failed", errno);
    }
    p += put;
    n -= size_t(put);
  }
}

void File::sync() {
  if (::fsync(fd_) != 0) throw_errno(op_, path_, "fsync failed", errno);
}

void File::close() {
  if (fd_ < 0) return;
  int fd = fd_;
  fd_ = -1;
  // close() may report a deferred write error (NFS); it must not be lost. The fd is released
  // even on EINTR, so never retry.
  if (::close(fd) != 0 && errno != EINTR) throw_errno(op_, path_, "close failed", errno);
}

void sync_dir(const std::string& dir, std::string_view op) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw_errno(op, dir, "cannot open folder to fsync it", errno);
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  // Some file systems cannot fsync a folder (EINVAL) and make renames durable anyway.
  if (rc != 0 && err != EINVAL) throw_errno(op, dir, "fsync of folder failed", err);
}

std::string join_path(const std::string& dir, std::string_view name) {
  return dir.empty() || dir.back() == '/' ? dir + std::string(name) : dir + "/" + std::string(name);
}

std::string parent_dir(const std::string& path_in) {
  std::string path = path_in;
  while (path.size() > 1 && path.back() == '/') path.pop_back();  // "a/b/" is inside "a"
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string unique_suffix() {
  static std::atomic<uint64_t> counter{0};
  static const uint32_t nonce = std::random_device{}();
  // The pid separates processes; the counter separates calls; the nonce separates a forked
  // child (same counter value) from its parent's pid reuse.
  return str(int64_t(::getpid()), "-", counter.fetch_add(1), "-", nonce);
}

void write_file_atomic(const std::string& path, std::string_view op,
                       const std::function<void(File&)>& write) {
  std::string dir = parent_dir(path);
  size_t slash = path.find_last_of('/');
  size_t name_at = slash == std::string::npos ? 0 : slash + 1;
  EMBER_CHECK(name_at < path.size(), IOError, op, " ", path, ": not a file name");
  // Same folder as `path`, so the rename cannot cross file systems; hidden so that tools
  // listing the folder do not pick it up.
  std::string tmp = path.substr(0, name_at) + "." + path.substr(name_at) + ".tmp-" + unique_suffix();
  int fd;
  do {
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) throw_errno(op, path, str("cannot create temporary file ", tmp), errno);
  File f(fd, path, std::string(op));  // errors name the destination the user asked for
  try {
    write(f);
    f.sync();
    f.close();
    if (::rename(tmp.c_str(), path.c_str()) != 0)
      throw_errno(op, path, str("cannot rename ", tmp, " to it"), errno);
  } catch (...) {
    f = File();  // close before unlinking
    ::unlink(tmp.c_str());
    throw;
  }
  sync_dir(dir, op);
}

}  // namespace ember::io::detail
