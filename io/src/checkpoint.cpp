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
#include <functional>
#include <system_error>

#include "ember/cuda.h"
#include "ember/error.h"
#include "ember/factory.h"
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

// meta.safetensors' tensors (the plain and the sharded checkpoint's).
StateDict meta_state(int64_t step, const Generator::State& rng) {
  StateDict m;
  m.set_int("format_version", kFormatVersion);
  m.set_int("step", step);
  // Generator state is unsigned; safetensors has no U64 that ember reads, so store the bits.
  m.set_int("rng.seed", std::bit_cast<int64_t>(rng.seed));
  m.set_int("rng.offset", std::bit_cast<int64_t>(rng.offset));
  return m;
}

int64_t meta_int(const StateDict& m, const char* key, const std::string& file, std::string_view op) {
  const Tensor* t = m.find(key);
  EMBER_CHECK(t != nullptr && t->dim() == 0 && t->dtype() == DType::i64, IOError, op, " ", file,
              ": missing or malformed entry '", key, "' (expected a 0-dim I64)");
  return t->item<int64_t>();
}

// meta.safetensors read back: its format version checked, step, RNG state, metadata.
struct MetaFile {
  StateDict tensors;
  int64_t step = 0;
  Generator::State rng;
  Metadata metadata;
};
MetaFile read_meta(const std::string& file, std::string_view op) {
  SafetensorsFile meta = detail::read_safetensors(file, Device::cpu(), op);
  const int64_t version = meta_int(meta.tensors, "format_version", file, op);
  EMBER_CHECK(version == kFormatVersion, IOError, op, " ", file, ": checkpoint format version ", version,
              " is not the supported ", kFormatVersion);
  MetaFile out;
  out.step = meta_int(meta.tensors, "step", file, op);
  out.rng.seed = std::bit_cast<uint64_t>(meta_int(meta.tensors, "rng.seed", file, op));
  out.rng.offset = std::bit_cast<uint64_t>(meta_int(meta.tensors, "rng.offset", file, op));
  out.tensors = std::move(meta.tensors);
  out.metadata = std::move(meta.metadata);
  return out;
}

// Writes `tensors` as the new file dir/name and makes it durable (the folder is synced later).
void write_durable(const std::string& dir, std::string_view name, const StateDict& tensors, const Metadata& metadata,
                   std::string_view op) {
  detail::File f = detail::File::create(join_path(dir, name), std::string(op));
  detail::write_safetensors(f, tensors, metadata, op);
  f.sync();
  f.close();
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

// Steps 3 and 4 of a save: `latest` names `name` (in place already), then older checkpoints
// beyond keep_last and leftovers of interrupted saves go.
void point_latest_and_prune(const std::string& dir, const std::string& name, int64_t step, int keep_last,
                            std::string_view op) {
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
      if (e.step <= step) older.push_back(e);
    // Newest first; the one just written has the largest step <= step.
    std::reverse(older.begin(), older.end());
    for (size_t i = size_t(keep_last); i < older.size(); ++i)
      trash(dir, fs::path(older[i].path).filename().string(), op);
  }
  for (const auto& n : list_names(dir, op))
    if (n.starts_with(kTmpPrefix) || n.starts_with(kTrashPrefix) || n.starts_with(kLatestTmpPrefix))
      remove_quietly(join_path(dir, n));
}

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
      if (part.member)
        write_durable(tmp, part.file, ckpt.*part.member, {}, op);
      else
        write_durable(tmp, part.file, meta_state(ckpt.step, ckpt.rng), Metadata(ckpt.meta.begin(), ckpt.meta.end()),
                      op);
    }
    detail::sync_dir(tmp, op);
    // 2. Into place.
    install_folder(dir, tmp, final_path, op);
  } catch (...) {
    remove_quietly(tmp);
    throw;
  }
  detail::sync_dir(dir, op);

  point_latest_and_prune(dir, name, ckpt.step, keep_last, op);
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
  if (!missing.empty())
    for (const auto& n : list_names(path, op))
      EMBER_CHECK(!n.starts_with("rank-"), IOError, op, " ", path,
                  ": a sharded checkpoint (fully_shard's); open it with io::ShardedCheckpointReader");
  EMBER_CHECK(missing.empty(), IOError, op, " ", path, ": incomplete checkpoint, missing ", missing);

  Checkpoint c;
  for (const Part& part : kParts) {
    std::string file = join_path(path, part.file);
    if (part.member) {
      c.*part.member = detail::read_safetensors(file, device, op).tensors;
      continue;
    }
    MetaFile meta = read_meta(file, op);
    c.step = meta.step;
    c.rng = meta.rng;
    c.meta.insert(meta.metadata.begin(), meta.metadata.end());
  }
  int64_t named = parse_step_name(fs::path(path).lexically_normal().filename().string());
  EMBER_CHECK(named < 0 || named == c.step, IOError, op, " ", path, ": folder is named for step ",
              named, " but holds step ", c.step);
  return c;
}

namespace {

// What load_latest_checkpoint does for either kind: `load` the folder `dir/latest` names, else
// the others newest first; false when `dir` holds no checkpoint at all (a fresh run). IOError
// when checkpoints exist but none loads.
bool load_newest(const std::string& dir, std::vector<std::string>* notes, std::string_view op,
                 const std::function<void(const std::string& path)>& load) {
  auto note = [&](const std::string& line) {
    if (notes)
      notes->push_back(line);
    else
      std::fprintf(stderr, "%s %s\n", std::string(op).c_str(), line.c_str());
  };
  std::error_code ec;
  auto st = fs::status(dir, ec);
  if (st.type() == fs::file_type::not_found) return false;  // a fresh run
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
      load(join_path(dir, target));
      return true;
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
      load(it->path);
      if (fell_back) note(str("loaded ", it->path, " instead"));
      return true;
    } catch (const Error& e) {
      note(str("skipping ", it->path, ": ", e.what()));
      failures += str("\n  ", e.what());
    }
  }
  EMBER_CHECK(failures.empty(), IOError, op, " ", dir, ": checkpoints exist but none loads:", failures);
  return false;
}

constexpr const char* kShardedTmpPrefix = ".tmp-sharded-";  // a kTmpPrefix name: cleaned like the others

std::string rank_file_name(int rank, int world) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "rank-%05d-of-%05d.safetensors", rank, world);
  return buf;
}

// A piece's place in the rank file's __metadata__: "begin;d0,d1,...".
std::string encode_piece(const TensorPiece& p) {
  std::string s = str(p.begin, ";");
  for (size_t i = 0; i < p.shape.size(); ++i) s += str(i ? "," : "", p.shape[i]);
  return s;
}

TensorPiece decode_piece(const std::string& s, const std::string& file, const std::string& key, std::string_view op) {
  TensorPiece p;
  const size_t semi = s.find(';');
  bool ok = semi != std::string::npos;
  std::vector<int64_t> dims;
  try {
    if (ok) {
      p.begin = std::stoll(s.substr(0, semi));
      std::string rest = s.substr(semi + 1);
      size_t at = 0;
      while (at < rest.size()) {
        size_t comma = rest.find(',', at);
        if (comma == std::string::npos) comma = rest.size();
        dims.push_back(std::stoll(rest.substr(at, comma - at)));
        at = comma + 1;
      }
    }
  } catch (const std::exception&) {
    ok = false;
  }
  for (int64_t d : dims) ok = ok && d >= 0;
  EMBER_CHECK(ok && p.begin >= 0, IOError, op, " ", file, ": malformed piece layout '", s, "' of '", key, "'");
  p.shape = Shape(dims);
  return p;
}

}  // namespace

std::optional<Checkpoint> load_latest_checkpoint(const std::string& dir, Device device,
                                                 std::vector<std::string>* notes) {
  // The fallback catches Error from a load: a fault recorded by earlier CUDA work (Note
  // [deferred device checks]) must not be raised into it, taken for a bad checkpoint and lost.
  const cuda::detail::DeferredErrorsHeld held;
  std::optional<Checkpoint> out;
  load_newest(dir, notes, "[load_latest_checkpoint]", [&](const std::string& path) { out = load_checkpoint(path, device); });
  return out;
}

std::string save_sharded_checkpoint(const std::string& dir, const ShardedCheckpoint& ckpt, int rank, int world,
                                    const std::function<void()>& barrier, int keep_last) {
  constexpr std::string_view op = "[save_sharded_checkpoint]";
  EMBER_CHECK(!dir.empty(), ValueError, op, " empty checkpoint folder name");
  EMBER_CHECK(world >= 1 && rank >= 0 && rank < world, ValueError, op, " rank ", rank, " of a world of ", world);
  EMBER_CHECK(bool(barrier), ValueError, op, " needs the ranks' barrier");
  const std::string name = checkpoint_folder_name(ckpt.step);
  const std::string tmp = join_path(dir, str(kShardedTmpPrefix, name));
  const std::string final_path = join_path(dir, name);
  // 0. Rank 0 makes the temporary folder (replacing one an interrupted save left).
  if (rank == 0) {
    std::error_code ec;
    const bool created = fs::create_directories(dir, ec);
    if (ec) throw IOError(str(op, " ", dir, ": cannot create checkpoint folder: ", ec.message()));
    EMBER_CHECK(fs::is_directory(dir, ec), IOError, op, " ", dir, ": exists but is not a folder");
    if (created) detail::sync_dir(detail::parent_dir(dir), op);
    remove_quietly(tmp);
    if (::mkdir(tmp.c_str(), 0755) != 0) detail::throw_errno(op, tmp, "cannot create folder", errno);
  }
  barrier();
  // 1. Every rank's pieces, durable.
  {
    Metadata layout;
    for (const auto& [key, piece] : ckpt.state.pieces) {
      const auto it = ckpt.state.layout.find(key);
      EMBER_CHECK(it != ckpt.state.layout.end(), ValueError, op, " rank ", rank, ": piece '", key, "' has no layout");
      layout[key] = encode_piece(it->second);
    }
    write_durable(tmp, rank_file_name(rank, world), ckpt.state.pieces, layout, op);
  }
  barrier();
  // 2-4. Rank 0: the rest, then into place, `latest`, pruning.
  if (rank == 0) {
    try {
      StateDict m = meta_state(ckpt.step, ckpt.rng);
      m.set_int("world_size", world);
      write_durable(tmp, "scheduler.safetensors", ckpt.scheduler, {}, op);
      write_durable(tmp, "meta.safetensors", m, Metadata(ckpt.meta.begin(), ckpt.meta.end()), op);
      detail::sync_dir(tmp, op);
      install_folder(dir, tmp, final_path, op);
    } catch (...) {
      remove_quietly(tmp);
      throw;
    }
    detail::sync_dir(dir, op);
    point_latest_and_prune(dir, name, ckpt.step, keep_last, op);
  }
  barrier();
  return final_path;
}

ShardedCheckpointReader::ShardedCheckpointReader(const std::string& path) : path_(path) {
  constexpr std::string_view op = "[ShardedCheckpointReader]";
  std::error_code ec;
  auto st = fs::status(path, ec);
  EMBER_CHECK(st.type() == fs::file_type::directory, IOError, op, " ", path, ": no such checkpoint folder");
  const std::string meta_file = join_path(path, "meta.safetensors");
  EMBER_CHECK(fs::exists(meta_file, ec), IOError, op, " ", path, ": incomplete checkpoint, missing meta.safetensors");
  MetaFile meta = read_meta(meta_file, op);
  EMBER_CHECK(meta.tensors.contains("world_size"), IOError, op, " ", path,
              ": not a sharded checkpoint (load it with load_checkpoint)");
  const int64_t world = meta_int(meta.tensors, "world_size", meta_file, op);
  EMBER_CHECK(world >= 1 && world < (1 << 20), IOError, op, " ", meta_file, ": world size ", world);
  world_ = int(world);
  step_ = meta.step;
  rng_ = meta.rng;
  meta_.insert(meta.metadata.begin(), meta.metadata.end());
  const int64_t named = parse_step_name(fs::path(path).lexically_normal().filename().string());
  EMBER_CHECK(named < 0 || named == step_, IOError, op, " ", path, ": folder is named for step ", named,
              " but holds step ", step_);
  std::string missing;
  for (int r = 0; r < world_; ++r) {
    files_.push_back(join_path(path, rank_file_name(r, world_)));
    if (!fs::exists(files_.back(), ec)) missing += str(missing.empty() ? "" : ", ", rank_file_name(r, world_));
  }
  const std::string sched = join_path(path, "scheduler.safetensors");
  if (!fs::exists(sched, ec)) missing += str(missing.empty() ? "" : ", ", "scheduler.safetensors");
  EMBER_CHECK(missing.empty(), IOError, op, " ", path, ": incomplete checkpoint, missing ", missing);
  scheduler_ = detail::read_safetensors(sched, Device::cpu(), op).tensors;
  for (size_t r = 0; r < files_.size(); ++r) {
    const SafetensorsHeader h = read_safetensors_header(files_[r]);
    for (const TensorInfo& info : h.tensors) {
      const auto it = h.metadata.find(info.name);
      EMBER_CHECK(it != h.metadata.end(), IOError, op, " ", files_[r], ": piece '", info.name, "' has no layout");
      const TensorPiece piece = decode_piece(it->second, files_[r], info.name, op);
      const int64_t numel = info.shape.numel();
      EMBER_CHECK(piece.begin + numel <= piece.shape.numel(), IOError, op, " ", files_[r], ": piece '", info.name,
                  "' [", piece.begin, ", ", piece.begin + numel, ") runs past its tensor of shape ", piece.shape);
      auto [e, fresh] = entries_.try_emplace(info.name);
      if (fresh) {
        e->second.shape = piece.shape;
        e->second.dtype = info.dtype;
      }
      EMBER_CHECK(e->second.shape == piece.shape && e->second.dtype == info.dtype, IOError, op, " ", files_[r],
                  ": piece '", info.name, "' belongs to a ", info.dtype, " tensor of shape ", piece.shape,
                  ", another rank's to a ", e->second.dtype, " tensor of shape ", e->second.shape);
      e->second.pieces.push_back({r, info.dtype, piece.begin, numel, h.data_start + info.begin});
    }
  }
}

bool ShardedCheckpointReader::contains(const std::string& key) const { return entries_.count(key) != 0; }

Shape ShardedCheckpointReader::shape(const std::string& key) const {
  const auto it = entries_.find(key);
  EMBER_CHECK(it != entries_.end(), ValueError, "[ShardedCheckpointReader] ", path_, " has no '", key, "'");
  return it->second.shape;
}

std::vector<std::string> ShardedCheckpointReader::keys() const {
  std::vector<std::string> out;
  for (const auto& [k, e] : entries_) out.push_back(k);
  return out;
}

Tensor ShardedCheckpointReader::read(const std::string& key, int64_t begin, int64_t numel) const {
  constexpr std::string_view op = "[ShardedCheckpointReader]";
  const auto it = entries_.find(key);
  EMBER_CHECK(it != entries_.end(), ValueError, op, " ", path_, " has no '", key, "'");
  const Entry& e = it->second;
  EMBER_CHECK(begin >= 0 && numel >= 0 && begin + numel <= e.shape.numel(), ValueError, op, " '", key,
              "': elements [", begin, ", ", begin + numel, ") outside its ", e.shape.numel());
  Tensor out = empty({numel}, e.dtype);
  char* dst = static_cast<char*>(out.data_ptr());
  const int64_t item = int64_t(itemsize(e.dtype));
  std::vector<std::pair<int64_t, int64_t>> covered;
  for (const Saved& p : e.pieces) {
    const int64_t lo = std::max(begin, p.begin), hi = std::min(begin + numel, p.begin + p.numel);
    if (lo >= hi) continue;
    detail::File f = detail::File::open_read(files_[p.file], std::string(op));
    f.read_at(dst + (lo - begin) * item, size_t((hi - lo) * item), p.offset + uint64_t((lo - p.begin) * item));
    covered.emplace_back(lo, hi);
  }
  std::sort(covered.begin(), covered.end());
  int64_t reached = begin;
  for (const auto& [lo, hi] : covered) {
    if (lo > reached) break;
    reached = std::max(reached, hi);
  }
  EMBER_CHECK(reached >= begin + numel, IOError, op, " ", path_, ": elements [", reached, ", ", begin + numel,
              ") of '", key, "' are in no rank's file");
  return out;
}

std::unique_ptr<ShardedCheckpointReader> open_latest_sharded_checkpoint(const std::string& dir,
                                                                        std::vector<std::string>* notes) {
  std::unique_ptr<ShardedCheckpointReader> out;
  load_newest(dir, notes, "[open_latest_sharded_checkpoint]",
              [&](const std::string& path) { out = std::make_unique<ShardedCheckpointReader>(path); });
  return out;
}

}  // namespace ember::io
