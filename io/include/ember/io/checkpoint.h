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
#include <map>
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

}  // namespace ember::io
