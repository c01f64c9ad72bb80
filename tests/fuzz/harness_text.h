// Fuzz harnesses for the language-model data loaders (GPT2Tokenizer's encoder.json/vocab.bpe,
// TokenShards), header-only like harness.h so that the libFuzzer targets
// (fuzz_tokenizer_files.cpp, fuzz_token_shards.cpp) and the CI replay of the kept inputs
// (tests/fixtures/fuzz/<target>/, replayed by tests/data/test_tokenizer.cpp and
// test_token_shards.cpp) run the same code.
//
// Contract checked for every input: the loader loads or throws ember::IOError; what loaded
// works (encode/decode round-trips any bytes; next() gives in-range windows). Anything else
// (another exception, a broken round trip, a sanitizer report) escapes and is a crash.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>

#include "ember/data/token_shards.h"
#include "ember/data/tokenizer.h"
#include "ember/error.h"
#include "harness.h"

namespace ember_fuzz {

// ---- fuzz_tokenizer_files: GPT2Tokenizer's loaders ----
// The input is split at kSeparator into encoder.json, vocab.bpe and a text; a missing part
// leaves that file missing (the text defaults to empty). When both files load, the text is
// encoded and decoded back, which must give it unchanged, and every id must be in range.
inline void run_tokenizer_files(const uint8_t* data, size_t size) {
  const auto parts = split(std::string_view(reinterpret_cast<const char*>(data), size));
  const std::string dir = scratch_dir() + "/gpt2";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  write_file(dir + "/encoder.json", parts[0]);
  if (parts.size() > 1) write_file(dir + "/vocab.bpe", parts[1]);
  const std::string_view text = parts.size() > 2 ? parts[2] : std::string_view();
  try {
    const auto tok = ember::data::GPT2Tokenizer::from_dir(dir);
    const auto ids = tok.encode(text);
    for (const int32_t id : ids)
      if (id < 0 || size_t(id) >= tok.vocab_size()) throw std::logic_error("encode: id out of range");
    if (tok.decode(ids) != text) throw std::logic_error("decode(encode(text)) != text");
  } catch (const ember::IOError&) {
  }
}

// ---- fuzz_token_shards: TokenShards ----
// Byte 0: bit 0 shuffle; bits 1-2 batch_size - 1; bits 3-5 seq_len index into
// {1, 2, 3, 4, 7, 8, 16, 64}; bit 6 world_size 2 (rank = bit 7) else 1; byte 1: vocab bound
// (0: none, else byte * 256); bytes 2-9: a position to seek to. The rest is split at
// kSeparator into up to four shard files in one folder. Then up to 3 batches at position 0
// and 2 at the sought position; every row must be a window of T+1 tokens (y = x shifted).
inline void run_token_shards(const uint8_t* data, size_t size) {
  if (size < 10) return;
  const uint8_t mode = data[0];
  const int64_t seq_lens[8] = {1, 2, 3, 4, 7, 8, 16, 64};
  ember::data::TokenShardsOptions opt;
  opt.shuffle = mode & 1;
  opt.batch_size = 1 + ((mode >> 1) & 3);
  opt.seq_len = seq_lens[(mode >> 3) & 7];
  opt.world_size = (mode & 64) ? 2 : 1;
  opt.rank = opt.world_size == 2 ? (mode >> 7) : 0;
  opt.vocab_size = int64_t(data[1]) * 256;
  opt.seed = 11;
  int64_t seek = 0;
  std::memcpy(&seek, data + 2, 8);
  seek &= (int64_t(1) << 62) - 1;  // TokenShards::set_position accepts [0, 2^62]
  const auto parts = split(std::string_view(reinterpret_cast<const char*>(data + 10), size - 10));
  const std::string dir = scratch_dir() + "/shards";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  for (size_t i = 0; i < parts.size() && i < 4; ++i)
    write_file(dir + "/s_" + std::to_string(i) + ".bin", parts[i]);
  auto check = [&](const std::pair<ember::Tensor, ember::Tensor>& batch) {
    const auto& [x, y] = batch;
    if (x.size(0) != opt.batch_size || x.size(1) != opt.seq_len || y.sizes() != x.sizes())
      throw std::logic_error("next: wrong batch shape");
    const int64_t* px = x.data_ptr<int64_t>();
    const int64_t* py = y.data_ptr<int64_t>();
    for (int64_t b = 0; b < opt.batch_size; ++b)
      for (int64_t t = 0; t + 1 < opt.seq_len; ++t)
        if (py[b * opt.seq_len + t] != px[b * opt.seq_len + t + 1]) throw std::logic_error("next: y is not x shifted");
    for (int64_t i = 0; i < x.numel(); ++i)
      if (px[i] < 0 || px[i] > 65535 || (opt.vocab_size > 0 && px[i] >= opt.vocab_size))
        throw std::logic_error("next: token out of range");
  };
  try {
    ember::data::TokenShards shards(dir, opt);
    for (int i = 0; i < 3; ++i) check(shards.next());
    shards.set_position(seek);
    check(shards.next());
    check(shards.next());
    if (shards.position() != seek + 2) throw std::logic_error("position did not advance by one per batch");
  } catch (const ember::IOError&) {
  }
}

}  // namespace ember_fuzz
