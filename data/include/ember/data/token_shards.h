// Token shards in llm.c's .bin format, read as (x, y) batches for language-model training.
//
//   File: a header of 256 little-endian int32 (magic 20240520, version 1, token count, the
//   rest 0), then `count` uint16 tokens. build/bin/gpt-prepare writes them.
//
//   data::TokenShards train("data/brown_tokens/brown_train_*.bin",
//                           {.batch_size = 8, .seq_len = 1024, .seed = 1, .rank = r,
//                            .world_size = w});
//   auto [x, y] = train.next();   // i64 [8, 1024] each, y[b, t] == x[b, t + 1]'s token
//
// Invariants:
// - A batch row is a window of T+1 consecutive tokens inside one file: x is its first T,
//   y its last T. Windows never cross files.
// - The whole iteration state is position() (the number of next() calls so far, the same
//   count on every rank): batch p depends only on (files, options, p), so set_position(p)
//   resumes exactly and reset() == set_position(0).
// - shuffle: row b of rank r at position p starts at window u = hash(seed, p, r*B + b) mod N
//   (N = every start position of a T+1 window in every file; files weighted by their
//   size), a counter-based hash (splitmix64), no state. Sequential: the files' windows at
//   offsets 0, T, 2T, ... (consecutive windows share one token, as llm.c reads) in file
//   order, global window k = (p*world_size + rank)*B + b, wrapping around after the last.
//   Either way, at each position the ranks' rows are disjoint slices of one global batch of
//   world_size*B rows.
// - next() reads only its B*(T+1) tokens (pread); nothing else is held in memory.
// - Every file is checked when opened: magic, version, token count against the file size,
//   at least T+1 tokens. With options.vocab_size > 0 every token read must be below it.
//   Failures throw ember::IOError "[TokenShards] <file>: <what is wrong>".
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ember/tensor.h"

namespace ember::data {

// llm.c's shard header.
inline constexpr int32_t kTokenShardMagic = 20240520;
inline constexpr int32_t kTokenShardVersion = 1;
inline constexpr int64_t kTokenShardHeaderInts = 256;

struct TokenShardsOptions {
  int64_t batch_size = 8;
  int64_t seq_len = 1024;
  bool shuffle = true;      // random windows (seeded) vs sequential
  uint64_t seed = 0;
  int rank = 0;
  int world_size = 1;       // each rank sees a disjoint part of each step
  int64_t vocab_size = 0;   // > 0: a token >= vocab_size in a batch is an IOError
};

class TokenShards {
 public:
  // path: one .bin file, a directory (all *.bin in sorted order), or a pattern whose file
  // name part has '*' / '?' ("dir/brown_train_*.bin"), matching files sorted by name.
  TokenShards(const std::string& path, TokenShardsOptions options);
  TokenShards(TokenShards&&) noexcept;
  TokenShards& operator=(TokenShards&&) noexcept;
  TokenShards(const TokenShards&) = delete;
  TokenShards& operator=(const TokenShards&) = delete;
  ~TokenShards();

  std::pair<Tensor, Tensor> next();  // x, y: i64 [B, T] on CPU; y is x shifted by one
  int64_t num_tokens() const;
  int64_t position() const;          // the whole iteration state is one counter
  void set_position(int64_t p);      // resume: same batches as an uninterrupted run (p <= 2^62)
  void reset();                      // position 0

  const std::vector<std::string>& files() const;
  const TokenShardsOptions& options() const { return options_; }
  // Sequential mode: windows in one pass over the files; batches (all ranks) per pass.
  int64_t windows_per_epoch() const;
  int64_t batches_per_epoch() const;

 private:
  struct File;
  TokenShardsOptions options_;
  std::vector<File> files_;
  std::vector<std::string> paths_;
  std::vector<int64_t> start_prefix_;  // shuffle: windows starting before file i
  std::vector<int64_t> seq_prefix_;    // sequential: windows before file i
  int64_t num_tokens_ = 0;
  int64_t position_ = 0;
  std::vector<uint16_t> buffer_;
};

}  // namespace ember::data
