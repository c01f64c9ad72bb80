// Training checkpoints: a folder of safetensors files that a crash can never half-write.
//
//   dir/latest                      "step-00000123\n": the checkpoint to resume from
//   dir/step-00000123/model.safetensors
//                    /optimizer.safetensors
//                    /scheduler.safetensors
//                    /meta.safetensors      step, CPU RNG state; __metadata__ = Checkpoint::meta
//
// Invariants (Note [Checkpoint crash safety]):
// - A `step-N` folder is complete by construction: it is written as `dir/.tmp-...`, every file
//   and the folder are fsynced, and only then is it renamed into place (and `dir` fsynced).
// - `latest` only ever names a folder already in place; it is replaced atomically (temporary
//   file, fsync, rename, fsync of `dir`).
// - Nothing older is removed before the new checkpoint and `latest` are durable, and a pruned
//   folder is first renamed to `dir/.trash-...`, so a crash mid-delete never leaves a partial
//   `step-N` folder.
// So a crash (SIGKILL, power loss) at any instant leaves the previous checkpoint loadable;
// leftovers (`.tmp-*`, `.trash-*`) are ignored by the loader and removed by the next save.
// One process writes to a given `dir` at a time (rank 0 in data-parallel training).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ember/device.h"
#include "ember/random.h"
#include "ember/state_dict.h"

namespace ember::io {

struct Checkpoint {
  StateDict model;      // nn::Module::state_dict()
  StateDict optimizer;  // Optimizer::state_dict()
  StateDict scheduler;  // LRScheduler::state_dict()
  int64_t step = 0;
  // default_generator(Device::cpu()).get_state() at save time; restoring it is the caller's
  // choice (default_generator().set_state(ckpt.rng)).
  Generator::State rng;
  std::map<std::string, std::string> meta;  // free-form: config, git commit, loss, ...
};

// Writes `dir/step-<step, 8 digits>/` (creating `dir` if needed), points `dir/latest` at it, then
// removes older checkpoints so that the newest `keep_last` with step <= ckpt.step remain
// (keep_last <= 0 keeps everything; checkpoints with a larger step, left by an abandoned run,
// are never removed). Saving a step that already exists replaces it atomically. Returns the
// checkpoint's folder. Throws IOError naming the path on any failure; the previous checkpoints
// are then untouched.
std::string save_checkpoint(const std::string& dir, const Checkpoint& ckpt, int keep_last = 2);

// Loads one checkpoint folder (`dir/step-N`). Tensors go to `device`. Throws IOError naming the
// folder when it is missing, incomplete or inconsistent.
Checkpoint load_checkpoint(const std::string& path, Device device = Device::cpu());

// Loads what `dir/latest` names; when that is missing or broken, the newest loadable `step-N`.
// Returns nullopt when `dir` does not exist or holds no checkpoint (a fresh run). Throws
// IOError when checkpoints exist but none loads, or `dir` cannot be read. What was skipped
// (interrupted saves, a broken `latest`, broken folders) is appended to `notes` as one line
// each, or printed to stderr when `notes` is null.
std::optional<Checkpoint> load_latest_checkpoint(const std::string& dir,
                                                 Device device = Device::cpu(),
                                                 std::vector<std::string>* notes = nullptr);

// The `step-N` folders of `dir`, oldest first (names only; nothing is loaded). Empty when
// `dir` does not exist.
struct CheckpointEntry {
  int64_t step = 0;
  std::string path;
};
std::vector<CheckpointEntry> list_checkpoints(const std::string& dir);

// "step-00000123"
std::string checkpoint_folder_name(int64_t step);

// ---- Sharded checkpoints (Note [sharded state] in ember/state_dict.h) ----
//
//   dir/latest
//   dir/step-00000123/rank-00000-of-00004.safetensors   each rank's pieces; __metadata__: where
//                    /rank-00001-of-00004.safetensors   each piece lies in its whole tensor
//                    /...
//                    /scheduler.safetensors             rank 0's
//                    /meta.safetensors                  step, CPU RNG, world size, Checkpoint::meta
//
// The crash safety of Note [Checkpoint crash safety] holds: every rank writes its file into
// dir/.tmp-sharded-step-N/ and fsyncs it; after a barrier rank 0 writes the rest, fsyncs the
// folder, renames it into place, points `latest` at it and prunes; a last barrier lets no rank
// run ahead of a save that is not in place. A crash at any instant leaves the previous
// checkpoint loadable. Every rank must see the same `dir` (one node, or a shared file system).
struct ShardedCheckpoint {
  ShardedStateDict state{};  // this rank's pieces (FSDPModule::sharded_state_dict(&optimizer))
  StateDict scheduler{};     // saved from rank 0
  int64_t step = 0;
  Generator::State rng{};                     // saved from rank 0
  std::map<std::string, std::string> meta{};  // saved from rank 0
};

// Collective over the `world` ranks (this one is `rank`); `barrier` is their group's barrier,
// e.g. [&] { distributed::default_group()->barrier(); }. Returns the checkpoint's folder.
// keep_last as save_checkpoint.
std::string save_sharded_checkpoint(const std::string& dir, const ShardedCheckpoint& ckpt, int rank, int world,
                                    const std::function<void()>& barrier, int keep_last = 2);

// A sharded checkpoint folder opened for reading at any world size: the headers of every
// rank's file (no tensor data until read()), the scheduler, step, RNG and meta.
class ShardedCheckpointReader final : public ShardedSource {
 public:
  // Throws IOError naming the folder when it is not a complete sharded checkpoint.
  explicit ShardedCheckpointReader(const std::string& path);
  bool contains(const std::string& key) const override;
  Shape shape(const std::string& key) const override;
  // Reads only the overlapping byte ranges of the saved pieces.
  Tensor read(const std::string& key, int64_t begin, int64_t numel) const override;

  const std::string& path() const { return path_; }
  int saved_world_size() const { return world_; }
  int64_t step() const { return step_; }
  const Generator::State& rng() const { return rng_; }
  const std::map<std::string, std::string>& meta() const { return meta_; }
  const StateDict& scheduler() const { return scheduler_; }
  std::vector<std::string> keys() const override;

 private:
  struct Saved {
    size_t file;
    DType dtype;
    int64_t begin, numel;
    uint64_t offset;  // of its first byte in the file
  };
  struct Entry {
    Shape shape;
    DType dtype;
    std::vector<Saved> pieces;
  };
  std::string path_;
  std::vector<std::string> files_;
  std::map<std::string, Entry> entries_;
  int world_ = 0;
  int64_t step_ = 0;
  Generator::State rng_;
  std::map<std::string, std::string> meta_;
  StateDict scheduler_;
};

// The sharded checkpoint `dir/latest` names, or the newest complete one; nullptr when `dir`
// holds none (a fresh run). Skipped folders are noted as in load_latest_checkpoint.
std::unique_ptr<ShardedCheckpointReader> open_latest_sharded_checkpoint(const std::string& dir,
                                                                        std::vector<std::string>* notes = nullptr);

}  // namespace ember::io
