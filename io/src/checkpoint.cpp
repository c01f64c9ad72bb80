// Atomic training checkpoints; the layout and Note [Checkpoint crash safety] are in
// ember/io/checkpoint.h. The order of operations in save_checkpoint is the invariant:
//   1. write every file into dir/.tmp-step-N-<unique>/, fsync each, fsync the folder;
//   2. rename it to dir/step-N (an existing step-N is swapped out atomically), fsync dir;
//   3. replace dir/latest atomically (temporary file, fsync, rename, fsync dir);
//   4. only now prune: rename each old folder to dir/.trash-... first, then delete it.
// A crash before 2 leaves only a .tmp folder, before 3 a `latest` naming the previous
// checkpoint, during 4 .trash folders: in every case the loader finds a complete checkpoint.
#include "ember/io/checkpoint.h"

#include <fcntl.h>  // AT_FDCWD, RENAME_EXCHANGE (renameat2)
#include <sys/stat.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <system_error>

#include "ember/cuda.h"
#include "ember/error.h"
#include "ember/io/safetensors.h"
#include "file_util.h"
#include "safetensors_detail.h"

namespace ember::io {

namespace fs = std::filesystem;

using detail::join_path;

namespace {

constexpr int64_t kFormatVersion = 1;
constexpr const char* kLatest = "latest";
constexpr const char* kTmpPrefix = ".tmp-";
constexpr const char* kTrashPrefix = ".trash-";
constexpr const char* kLatestTmpPrefix = ".latest.tmp-";  // write_file_atomic's temporary name

// The step of a folder named "step-<digits>", or -1.
int64_t parse_step_name(std::string_view name) {
  constexpr std::string_view prefix = "step-";
  if (name.size() <= prefix.size() || name.size() > prefix.size() + 18 ||
      name.substr(0, prefix.size()) != prefix)
    return -1;
  int64_t step = 0;
  for (char c : name.substr(prefix.size())) {
    if (c < '0' || c > '9') return -1;
    step = step * 10 + (c - '0');
  }
  return step;
}

// Directory entries of `dir` (names only); IOError when it cannot be read.
std::vector<std::string> list_names(const std::string& dir, std::string_view op) {
  std::vector<std::string> names;
  std::error_code ec;
  fs::directory_iterator it(dir, ec), end;
  if (ec) throw IOError(str(op, " ", dir, ": cannot list folder: ", ec.message()));
  for (; it != end; it.increment(ec)) {
    if (ec) throw IOError(str(op, " ", dir, ": cannot list folder: ", ec.message()));
    names.push_back(it->path().filename().string());
  }
  return names;
}

// Best effort: a leftover that cannot be removed now is removed by a later save.
void remove_quietly(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
}

// Moves `path` out of the way under a .trash- name (atomic), then deletes it.
void trash(const std::string& dir, const std::string& name, std::string_view op) {
  std::string to = join_path(dir, str(kTrashPrefix, name, "-", detail::unique_suffix()));
  if (::rename(join_path(dir, name).c_str(), to.c_str()) != 0)
    detail::throw_errno(op, join_path(dir, name), "cannot move aside", errno);
  remove_quietly(to);
}

// Puts the finished folder `tmp` at `final_path`, replacing an existing checkpoint of the same
// step without a moment where neither exists.
void install_folder(const std::string& dir, const std::string& tmp, const std::string& final_path,
                    std::string_view op) {
  if (::rename(tmp.c_str(), final_path.c_str()) == 0) return;
  if (errno != EEXIST && errno != ENOTEMPTY)
    detail::throw_errno(op, final_path, str("cannot rename ", tmp, " to it"), errno);
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, final_path.c_str(), RENAME_EXCHANGE) == 0) {
    remove_quietly(tmp);  // now holds the replaced checkpoint
    return;
  }
  // No atomic exchange on this file system: move the old one aside first. A crash in between
  // leaves no folder for this step, but `latest` still names the one before, which is intact.
  std::string aside = join_path(dir, str(kTrashPrefix, fs::path(final_path).filename().string(), "-",
                                         detail::unique_suffix()));
  if (::rename(final_path.c_str(), aside.c_str()) != 0)
    detail::throw_errno(op, final_path, "cannot move the existing checkpoint aside", errno);
  if (::rename(tmp.c_str(), final_path.c_str()) != 0)
    detail::throw_errno(op, final_path, str("cannot rename ", tmp, " to it"), errno);
  remove_quietly(aside);
}

StateDict meta_state(const Checkpoint& c) {
  StateDict m;
  m.set_int("format_version", kFormatVersion);
  m.set_int("step", c.step);
  // Generator state is unsigned; safetensors has no U64 that ember reads, so store the bits.
  m.set_int("rng.seed", std::bit_cast<int64_t>(c.rng.seed));
  m.set_int("rng.offset", std::bit_cast<int64_t>(c.rng.offset));
  return m;
}

int64_t meta_int(const StateDict& m, const char* key, const std::string& file, std::string_view op) {
  const Tensor* t = m.find(key);
  EMBER_CHECK(t != nullptr && t->dim() == 0 && t->dtype() == DType::i64, IOError, op, " ", file,
              ": missing or malformed entry '", key, "' (expected a 0-dim I64)");
  return t->item<int64_t>();
}

struct Part {
  const char* file;
  StateDict Checkpoint::*member;  // null for the meta part
};
constexpr Part kParts[] = {
    {"model.safetensors", &Checkpoint::model},
    {"optimizer.safetensors", &Checkpoint::optimizer},
    {"scheduler.safetensors", &Checkpoint::scheduler},
    {"meta.safetensors", nullptr},
};

}  // namespace

std::string checkpoint_folder_name(int64_t step) {
  EMBER_CHECK(step >= 0, ValueError, "[checkpoint] step must be non-negative, got ", step);
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%08lld", static_cast<long long>(step));
  return buf;
}

std::vector<CheckpointEntry> list_checkpoints(const std::string& dir) {
  constexpr std::string_view op = "[list_checkpoints]";
  std::error_code ec;
  if (!fs::exists(dir, ec)) return {};
  std::vector<CheckpointEntry> out;
  for (const auto& name : list_names(dir, op)) {
    int64_t step = parse_step_name(name);
    const std::string path = join_path(dir, name);
    if (step >= 0 && fs::is_directory(path, ec)) out.push_back({step, path});
  }
  std::sort(out.begin(), out.end(),
            [](const CheckpointEntry& a, const CheckpointEntry& b) { return a.step < b.step; });
  return out;
}

std::string save_checkpoint(const std::string& dir, const Checkpoint& ckpt, int keep_last) {
  constexpr std::string_view op = "[save_checkpoint]";
  EMBER_CHECK(!dir.empty(), ValueError, op, " empty checkpoint folder name");
  std::string name = checkpoint_folder_name(ckpt.step);
  std::error_code ec;
  bool created = fs::create_directories(dir, ec);
  if (ec) throw IOError(str(op, " ", dir, ": cannot create checkpoint folder: ", ec.message()));
  EMBER_CHECK(fs::is_directory(dir, ec), IOError, op, " ", dir, ": exists but is not a folder");
  // A new `dir` is itself only durable once its parent's entry is.
  if (created) detail::sync_dir(detail::parent_dir(dir), op);

  // 1. Everything into a temporary folder, durable before it becomes visible.
  std::string tmp = join_path(dir, str(kTmpPrefix, name, "-", detail::unique_suffix()));
  if (::mkdir(tmp.c_str(), 0755) != 0) detail::throw_errno(op, tmp, "cannot create folder", errno);
  std::string final_path = join_path(dir, name);
  try {
    for (const Part& part : kParts) {
      detail::File f = detail::File::create(join_path(tmp, part.file), std::string(op));
      if (part.member)
        detail::write_safetensors(f, ckpt.*part.member, {}, op);
      else
        detail::write_safetensors(f, meta_state(ckpt), Metadata(ckpt.meta.begin(), ckpt.meta.end()), op);
      f.sync();
      f.close();
    }
    detail::sync_dir(tmp, op);
    // 2. Into place.
    install_folder(dir, tmp, final_path, op);
  } catch (...) {
    remove_quietly(tmp);
    throw;
  }
  detail::sync_dir(dir, op);

  // 3. Point `latest` at it.
  detail::write_file_atomic(join_path(dir, kLatest), op, [&](detail::File& f) {
    std::string line = name + "\n";
    f.write_all(line.data(), line.size());
  });

  // 4. Prune older checkpoints, then leftovers of interrupted saves (one writer per folder, so
  // any .tmp- folder now is dead).
  if (keep_last > 0) {
    std::vector<CheckpointEntry> older;
    for (auto& e : list_checkpoints(dir))
      if (e.step <= ckpt.step) older.push_back(e);
    // Newest first; the one just written has the largest step <= ckpt.step.
    std::reverse(older.begin(), older.end());
    for (size_t i = size_t(keep_last); i < older.size(); ++i)
      trash(dir, fs::path(older[i].path).filename().string(), op);
  }
  for (const auto& n : list_names(dir, op))
    if (n.starts_with(kTmpPrefix) || n.starts_with(kTrashPrefix) || n.starts_with(kLatestTmpPrefix))
      remove_quietly(join_path(dir, n));
  return final_path;
}

Checkpoint load_checkpoint(const std::string& path, Device device) {
  constexpr std::string_view op = "[load_checkpoint]";
  std::error_code ec;
  auto st = fs::status(path, ec);
  EMBER_CHECK(st.type() != fs::file_type::not_found, IOError, op, " ", path,
              ": no such checkpoint folder");
  EMBER_CHECK(!ec, IOError, op, " ", path, ": cannot access: ", ec.message());
  EMBER_CHECK(st.type() == fs::file_type::directory, IOError, op, " ", path, ": not a folder");
  // Report every missing part at once: "incomplete" is the likely story (a copy cut short).
  std::string missing;
  for (const Part& part : kParts)
    if (!fs::exists(join_path(path, part.file), ec)) missing += str(missing.empty() ? "" : ", ", part.file);
  EMBER_CHECK(missing.empty(), IOError, op, " ", path, ": incomplete checkpoint, missing ", missing);

  Checkpoint c;
  for (const Part& part : kParts) {
    std::string file = join_path(path, part.file);
    if (part.member) {
      c.*part.member = detail::read_safetensors(file, device, op).tensors;
      continue;
    }
    SafetensorsFile meta = detail::read_safetensors(file, Device::cpu(), op);
    int64_t version = meta_int(meta.tensors, "format_version", file, op);
    EMBER_CHECK(version == kFormatVersion, IOError, op, " ", file, ": checkpoint format version ",
                version, " is not the supported ", kFormatVersion);
    c.step = meta_int(meta.tensors, "step", file, op);
    c.rng.seed = std::bit_cast<uint64_t>(meta_int(meta.tensors, "rng.seed", file, op));
    c.rng.offset = std::bit_cast<uint64_t>(meta_int(meta.tensors, "rng.offset", file, op));
    c.meta.insert(meta.metadata.begin(), meta.metadata.end());
  }
  int64_t named = parse_step_name(fs::path(path).lexically_normal().filename().string());
  EMBER_CHECK(named < 0 || named == c.step, IOError, op, " ", path, ": folder is named for step ",
              named, " but holds step ", c.step);
  return c;
}

std::optional<Checkpoint> load_latest_checkpoint(const std::string& dir, Device device,
                                                 std::vector<std::string>* notes) {
  constexpr std::string_view op = "[load_latest_checkpoint]";
  // The fallback below catches Error from a load: a fault recorded by earlier CUDA work (Note
  // [deferred device checks]) must not be raised into it, taken for a bad checkpoint and lost.
  const cuda::detail::DeferredErrorsHeld held;
  auto note = [&](const std::string& line) {
    if (notes)
      notes->push_back(line);
    else
      std::fprintf(stderr, "%s %s\n", std::string(op).c_str(), line.c_str());
  };
  std::error_code ec;
  auto st = fs::status(dir, ec);
  if (st.type() == fs::file_type::not_found) return std::nullopt;  // a fresh run
  EMBER_CHECK(!ec, IOError, op, " ", dir, ": cannot access: ", ec.message());
  EMBER_CHECK(st.type() == fs::file_type::directory, IOError, op, " ", dir, ": not a folder");

  std::vector<std::string> names = list_names(dir, op);
  std::sort(names.begin(), names.end());
  for (const auto& n : names)
    if (n.starts_with(kTmpPrefix) || n.starts_with(kTrashPrefix))
      note(str("ignoring ", join_path(dir, n), ": left by an interrupted save or prune"));

  std::string failures;  // for the error when nothing loads
  std::string tried;
  bool fell_back = false;
  std::string latest_path = join_path(dir, kLatest);
  if (fs::exists(latest_path, ec)) {
    std::string target;
    try {
      detail::File f = detail::File::open_read(latest_path, std::string(op));
      uint64_t size = f.size();
      EMBER_CHECK(size <= 64, IOError, op, " ", latest_path, ": not a checkpoint pointer (", size, " bytes)");
      target.resize(size);
      f.read_at(target.data(), size, 0);
      while (!target.empty() && (target.back() == '\n' || target.back() == ' ')) target.pop_back();
      EMBER_CHECK(parse_step_name(target) >= 0, IOError, op, " ", latest_path,
                  ": does not name a step-N folder");
      tried = target;
      return load_checkpoint(join_path(dir, target), device);
    } catch (const Error& e) {
      note(str("latest names '", target, "', which does not load (", e.what(),
               "); falling back to the newest checkpoint that loads"));
      failures += str("\n  ", e.what());
      fell_back = true;
    }
  }
  auto entries = list_checkpoints(dir);
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
    std::string name = fs::path(it->path).filename().string();
    if (name == tried) continue;
    try {
      Checkpoint c = load_checkpoint(it->path, device);
      if (fell_back) note(str("loaded ", it->path, " instead"));
      return c;
    } catch (const Error& e) {
      note(str("skipping ", it->path, ": ", e.what()));
      failures += str("\n  ", e.what());
    }
  }
  EMBER_CHECK(failures.empty(), IOError, op, " ", dir,
              ": checkpoints exist but none loads:", failures);
  return std::nullopt;
}

}  // namespace ember::io
