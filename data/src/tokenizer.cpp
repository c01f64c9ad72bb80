// GPT-2 byte-level BPE (see tokenizer.h for the contract).
//
// Invariants:
// - Tokens are handled as raw bytes internally: encoder.json's keys are decoded through the
//   inverse of GPT-2's bytes_to_unicode table once at load, so encode never builds the
//   "Ġ"-style strings and decode is a concatenation of byte strings.
// - BPE works on token ids: merges_ maps the pair (left id, right id) to (rank, merged id).
// - Two BPE loops give the same result (Note [BPE with a heap]): the textbook loop (lowest-
//   ranked pair, merged everywhere left to right, repeat) for short pieces, and a heap of
//   candidate pairs ordered by (rank, position) for long ones, used only when the merges
//   list is "monotonic" (both parts of merge r are bytes or made by merges ranked below r),
//   which load() checks; GPT-2's list is. The heap bounds a megabyte-long piece to
//   O(n log n) instead of O(n^2).
// - Every PCRE2 return code is checked. A match error (JIT stack or heap limit on a
//   pathological input) never loses bytes: the next character becomes its own piece.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "ember/data/tokenizer.h"

#include <pcre2.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <queue>
#include <sstream>
#include <unordered_map>

#include "ember/error.h"

namespace ember::data {

namespace {

constexpr const char* kTag = "[GPT2Tokenizer]";
constexpr size_t kCacheMaxEntries = 1 << 17;
constexpr size_t kCacheMaxPieceBytes = 128;
constexpr size_t kHeapMinSymbols = 48;

// GPT-2's pre-tokenization regex with \s spelled out as the Unicode White_Space property
// (PCRE2's UCP \s would add U+180E; see Note [GPT-2 reference differences] in tokenizer.h).
#define EMBER_WS "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
constexpr const char* kPattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" EMBER_WS "\\p{L}\\p{N}]+|[" EMBER_WS
    "]+(?![^" EMBER_WS "])|[" EMBER_WS "]+";
#undef EMBER_WS

// GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the other 68 bytes to
// U+0100 onwards, in byte order.
std::array<uint32_t, 256> bytes_to_unicode() {
  std::array<uint32_t, 256> table{};
  std::array<bool, 256> printable{};
  for (int b = '!'; b <= '~'; ++b) printable[b] = true;
  for (int b = 0xA1; b <= 0xAC; ++b) printable[b] = true;
  for (int b = 0xAE; b <= 0xFF; ++b) printable[b] = true;
  uint32_t n = 0;
  for (int b = 0; b < 256; ++b) table[b] = printable[b] ? uint32_t(b) : 256 + n++;
  return table;
}

std::string read_whole_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw IOError(str(kTag, " ", path, ": cannot open: ", std::strerror(errno)));
  std::ostringstream s;
  s << f.rdbuf();
  if (f.bad()) throw IOError(str(kTag, " ", path, ": read error"));
  return s.str();
}

// Decodes one UTF-8 code point at s[i]; returns its length, 0 when invalid.
size_t utf8_decode(std::string_view s, size_t i, uint32_t& cp) {
  const auto c = static_cast<unsigned char>(s[i]);
  size_t len;
  uint32_t min;
  if (c < 0x80) { cp = c; return 1; }
  if ((c & 0xE0) == 0xC0) { len = 2; cp = c & 0x1F; min = 0x80; }
  else if ((c & 0xF0) == 0xE0) { len = 3; cp = c & 0x0F; min = 0x800; }
  else if ((c & 0xF8) == 0xF0) { len = 4; cp = c & 0x07; min = 0x10000; }
  else return 0;
  if (i + len > s.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    const auto cc = static_cast<unsigned char>(s[i + k]);
    if ((cc & 0xC0) != 0x80) return 0;
    cp = cp << 6 | (cc & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

struct PairHash {
  size_t operator()(uint64_t k) const noexcept { return size_t(k * 0x9E3779B97F4A7C15ull >> 17); }
};

std::string hex_cp(uint32_t cp) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "U+%04X", unsigned(cp));
  return buf;
}

uint64_t pair_key(int32_t a, int32_t b) { return uint64_t(uint32_t(a)) << 32 | uint32_t(b); }

}  // namespace

struct GPT2Tokenizer::Impl {
  std::vector<std::string> id_to_bytes;
  std::unordered_map<std::string, int32_t> bytes_to_id;
  std::array<int32_t, 256> byte_id{};
  struct Merge {
    int32_t rank, id;
  };
  std::unordered_map<uint64_t, Merge, PairHash> merges;
  size_t num_merges = 0;
  bool monotonic = false;
  int32_t eot = -1;

  pcre2_code* re = nullptr;
  bool jit = false;

  mutable std::mutex cache_mutex;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache;

  ~Impl() {
    if (re) pcre2_code_free(re);
  }

  void load_encoder(const std::string& path);
  void load_merges(const std::string& path);
  void compile_regex();
  void bpe(std::string_view piece, std::vector<int32_t>& out) const;
  void bpe_simple(std::vector<int32_t>& word) const;
  void bpe_heap(std::vector<int32_t>& word) const;
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
  template <class F>
  void for_each_piece(std::string_view text, F&& f) const;

  const Merge* find_merge(int32_t a, int32_t b) const {
    const auto it = merges.find(pair_key(a, b));
    return it == merges.end() ? nullptr : &it->second;
  }
};

void GPT2Tokenizer::Impl::load_encoder(const std::string& path) {
  const std::string text = read_whole_file(path);
  auto fail = [&](const auto&... what) -> void { throw IOError(str(kTag, " ", path, ": ", what...)); };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(text.empty() ? "empty file" : "malformed JSON (truncated?): ", e.what());
  }
  if (!j.is_object()) fail("expected a JSON object mapping tokens to ids, got ", j.type_name());
  if (j.empty()) fail("no tokens");
  if (j.size() > size_t(INT32_MAX)) fail("too many tokens");
  std::array<int32_t, 512> unicode_to_byte;
  unicode_to_byte.fill(-1);
  const auto table = bytes_to_unicode();
  for (int b = 0; b < 256; ++b) unicode_to_byte[table[b]] = b;

  const size_t n = j.size();
  id_to_bytes.assign(n, std::string());
  std::vector<bool> seen(n, false);
  bytes_to_id.reserve(n * 2);
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();
    if (!it.value().is_number_integer())
      fail("token \"", key, "\": expected an integer id, got ", it.value().type_name());
    const int64_t id = it.value().get<int64_t>();
    if (id < 0 || uint64_t(id) >= n)
      fail("token \"", key, "\": id ", id, " outside [0, ", n, ") (ids must be 0..", n - 1,
           " without gaps)");
    if (seen[size_t(id)]) fail("id ", id, " is given to two tokens");
    seen[size_t(id)] = true;
    std::string bytes;
    for (size_t i = 0; i < key.size();) {
      uint32_t cp = 0;
      const size_t len = utf8_decode(key, i, cp);
      if (len == 0) fail("token \"", key, "\": invalid UTF-8");
      if (cp >= unicode_to_byte.size() || unicode_to_byte[cp] < 0)
        fail("token \"", key, "\": character ", hex_cp(cp), " is not in GPT-2's byte alphabet");
      bytes.push_back(char(unicode_to_byte[cp]));
      i += len;
    }
    if (bytes.empty()) fail("empty token for id ", id);
    if (!bytes_to_id.emplace(bytes, int32_t(id)).second) fail("token \"", key, "\" repeats");
    id_to_bytes[size_t(id)] = std::move(bytes);
  }
  for (int b = 0; b < 256; ++b) {
    const auto it = bytes_to_id.find(std::string(1, char(b)));
    if (it == bytes_to_id.end()) fail("no token for the single byte ", b, " (every byte needs one)");
    byte_id[size_t(b)] = it->second;
  }
  const auto eot_it = bytes_to_id.find("<|endoftext|>");
  if (eot_it == bytes_to_id.end()) fail("no \"<|endoftext|>\" token");
  eot = eot_it->second;
}

void GPT2Tokenizer::Impl::load_merges(const std::string& path) {
  const std::string text = read_whole_file(path);
  auto fail = [&](const auto&... what) -> void { throw IOError(str(kTag, " ", path, ": ", what...)); };
  std::array<int32_t, 512> unicode_to_byte;
  unicode_to_byte.fill(-1);
  const auto table = bytes_to_unicode();
  for (int b = 0; b < 256; ++b) unicode_to_byte[table[b]] = b;

  // The decoded bytes of one symbol of line `line_no`, or a failure naming it.
  auto decode_symbol = [&](std::string_view sym, size_t line_no) {
    std::string bytes;
    for (size_t i = 0; i < sym.size();) {
      uint32_t cp = 0;
      const size_t len = utf8_decode(sym, i, cp);
      if (len == 0) fail("line ", line_no, ": invalid UTF-8");
      if (cp >= unicode_to_byte.size() || unicode_to_byte[cp] < 0)
        fail("line ", line_no, ": symbol \"", sym, "\" has character ", hex_cp(cp),
             " outside GPT-2's byte alphabet");
      bytes.push_back(char(unicode_to_byte[cp]));
      i += len;
    }
    return bytes;
  };
  auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; };

  if (text.empty()) fail("empty file (expected \"#version: ...\" and one merge per line)");
  if (text.rfind("#version", 0) != 0)
    fail("line 1: expected the \"#version: ...\" header of a vocab.bpe file");
  // The highest rank of a merge producing each token id (-1: a byte or never produced).
  std::vector<int32_t> made_at(id_to_bytes.size(), -1);
  std::vector<int32_t> first_made(id_to_bytes.size(), -1);
  monotonic = true;
  size_t pos = text.find('\n');
  size_t line_no = 1;
  int32_t rank = 0;
  merges.reserve(64 * 1024);
  while (pos != std::string::npos && pos + 1 <= text.size()) {
    const size_t start = pos + 1;
    size_t end = text.find('\n', start);
    pos = end;
    if (end == std::string::npos) end = text.size();
    ++line_no;
    std::string_view line(text.data() + start, end - start);
    std::vector<std::string_view> fields;
    for (size_t i = 0; i < line.size();) {
      while (i < line.size() && is_space(line[i])) ++i;
      size_t k = i;
      while (k < line.size() && !is_space(line[k])) ++k;
      if (k > i) fields.push_back(line.substr(i, k - i));
      i = k;
    }
    if (fields.empty()) continue;  // blank lines (the final newline) carry no merge
    if (fields.size() != 2)
      fail("line ", line_no, ": expected two symbols separated by a space, got ", fields.size(),
           " field", fields.size() == 1 ? "" : "s", " (truncated or malformed merges line)");
    const std::string a = decode_symbol(fields[0], line_no), b = decode_symbol(fields[1], line_no);
    const auto ia = bytes_to_id.find(a), ib = bytes_to_id.find(b), ic = bytes_to_id.find(a + b);
    if (ia == bytes_to_id.end() || ib == bytes_to_id.end())
      fail("line ", line_no, ": symbol \"", ia == bytes_to_id.end() ? fields[0] : fields[1],
           "\" is not in the encoder's vocabulary");
    if (ic == bytes_to_id.end())
      fail("line ", line_no, ": the merge \"", fields[0], fields[1],
           "\" is not in the encoder's vocabulary");
    // As GPT-2's dict(zip(merges, range(...))): a repeated pair keeps its last rank.
    merges[pair_key(ia->second, ib->second)] = Merge{rank, ic->second};
    if (made_at[size_t(ia->second)] >= rank || made_at[size_t(ib->second)] >= rank) monotonic = false;
    if (made_at[size_t(ic->second)] >= 0) monotonic = false;  // two merges make one token
    made_at[size_t(ic->second)] = rank;
    if (rank == INT32_MAX) fail("too many merges");
    ++rank;
  }
  num_merges = size_t(rank);
  // GPT-2's files: 256 byte tokens + one token per merge + "<|endoftext|>". A vocab.bpe cut
  // short at a line boundary would otherwise load silently with fewer merges.
  if (num_merges + 257 != id_to_bytes.size())
    fail("has ", num_merges, " merges but the encoder's ", id_to_bytes.size(),
         " tokens need ", id_to_bytes.size() >= 257 ? id_to_bytes.size() - 257 : 0,
         " (256 bytes + merges + <|endoftext|>): truncated, or from another vocabulary");
}

void GPT2Tokenizer::Impl::compile_regex() {
  int err = 0;
  PCRE2_SIZE err_off = 0;
  re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kPattern), PCRE2_ZERO_TERMINATED,
                     PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &err_off, nullptr);
  if (!re) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    throw Error(str(kTag, " cannot compile the pre-tokenization regex at offset ", size_t(err_off),
                    ": ", reinterpret_cast<const char*>(msg)));
  }
  // JIT is an optimization: PCRE2 built without it answers PCRE2_ERROR_JIT_BADOPTION and the
  // interpreter is used.
  jit = pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) == 0;
}

void GPT2Tokenizer::Impl::bpe_simple(std::vector<int32_t>& word) const {
  std::vector<int32_t> next;
  next.reserve(word.size());
  while (word.size() > 1) {
    int32_t best_rank = INT32_MAX, best_a = -1, best_b = -1, best_id = -1;
    for (size_t i = 0; i + 1 < word.size(); ++i) {
      const Merge* m = find_merge(word[i], word[i + 1]);
      if (m && m->rank < best_rank) {
        best_rank = m->rank;
        best_a = word[i];
        best_b = word[i + 1];
        best_id = m->id;
      }
    }
    if (best_id < 0) break;
    next.clear();
    for (size_t i = 0; i < word.size();) {
      if (i + 1 < word.size() && word[i] == best_a && word[i + 1] == best_b) {
        next.push_back(best_id);
        i += 2;
      } else {
        next.push_back(word[i++]);
      }
    }
    word.swap(next);
  }
}

// Note [BPE with a heap]: candidates (rank, left position) are popped in order; a popped
// candidate is stale when either symbol changed since it was pushed. With a monotonic merges
// list a merge can only create pairs of higher rank, so popping by (rank, position) merges
// exactly what the textbook loop merges: all occurrences of the lowest rank, left to right,
// before any higher rank.
void GPT2Tokenizer::Impl::bpe_heap(std::vector<int32_t>& word) const {
  const int32_t n = int32_t(word.size());
  std::vector<int32_t> prev(static_cast<size_t>(n)), next(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) {
    prev[size_t(i)] = i - 1;
    next[size_t(i)] = i + 1 < n ? i + 1 : -1;
  }
  struct Cand {
    int32_t rank, left, right, a, b;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto push = [&](int32_t l) {
    if (l < 0) return;
    const int32_t r = next[size_t(l)];
    if (r < 0) return;
    if (const Merge* m = find_merge(word[size_t(l)], word[size_t(r)]))
      heap.push(Cand{m->rank, l, r, word[size_t(l)], word[size_t(r)]});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  std::vector<bool> alive(size_t(n), true);
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    if (!alive[size_t(c.left)] || !alive[size_t(c.right)] || next[size_t(c.left)] != c.right ||
        word[size_t(c.left)] != c.a || word[size_t(c.right)] != c.b)
      continue;
    word[size_t(c.left)] = find_merge(c.a, c.b)->id;
    alive[size_t(c.right)] = false;
    const int32_t after = next[size_t(c.right)];
    next[size_t(c.left)] = after;
    if (after >= 0) prev[size_t(after)] = c.left;
    push(prev[size_t(c.left)]);
    push(c.left);
  }
  size_t k = 0;
  for (int32_t i = 0; i >= 0 && i < n; i = next[size_t(i)]) word[k++] = word[size_t(i)];
  word.resize(k);
}

void GPT2Tokenizer::Impl::bpe(std::string_view piece, std::vector<int32_t>& out) const {
  std::vector<int32_t> word(piece.size());
  for (size_t i = 0; i < piece.size(); ++i) word[i] = byte_id[static_cast<unsigned char>(piece[i])];
  if (monotonic && word.size() >= kHeapMinSymbols)
    bpe_heap(word);
  else
    bpe_simple(word);
  out.insert(out.end(), word.begin(), word.end());
}

void GPT2Tokenizer::Impl::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.size() == 1) {
    out.push_back(byte_id[static_cast<unsigned char>(piece[0])]);
    return;
  }
  if (piece.size() > kCacheMaxPieceBytes) {
    bpe(piece, out);
    return;
  }
  std::string key(piece);
  {
    std::lock_guard<std::mutex> lock(cache_mutex);
    const auto it = cache.find(key);
    if (it != cache.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t before = out.size();
  bpe(piece, out);
  std::vector<int32_t> ids(out.begin() + std::ptrdiff_t(before), out.end());
  std::lock_guard<std::mutex> lock(cache_mutex);
  if (cache.size() >= kCacheMaxEntries) cache.clear();  // bounded: arbitrary input cannot grow it
  cache.emplace(std::move(key), std::move(ids));
}

// Calls f(piece) for consecutive pieces covering `text` exactly.
template <class F>
void GPT2Tokenizer::Impl::for_each_piece(std::string_view text, F&& f) const {
  auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const PCRE2_SIZE length = text.size();
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
      pcre2_match_data_create_from_pattern(re, nullptr), &pcre2_match_data_free);
  if (!md) throw OutOfMemoryError(str(kTag, " cannot allocate PCRE2 match data"));
  // The next character (valid UTF-8 sequence or single byte) as its own piece.
  auto one_char = [&](size_t at) {
    uint32_t cp = 0;
    const size_t len = utf8_decode(text, at, cp);
    return len ? len : size_t(1);
  };
  size_t pos = 0;
  while (pos < length) {
    const int rc = pcre2_match(re, subject, length, pos, 0, md.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) {
      // Only invalid UTF-8 is left (every valid character matches some branch).
      for (; pos < length; ++pos) f(text.substr(pos, 1));
      return;
    }
    if (rc < 0) {
      // A resource limit (JIT stack, heap, match limit) on a pathological input.
      const size_t len = one_char(pos);
      f(text.substr(pos, len));
      pos += len;
      continue;
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    const size_t start = ov[0], end = ov[1];
    // Bytes the regex skipped are invalid UTF-8: one piece per byte.
    for (; pos < start; ++pos) f(text.substr(pos, 1));
    if (end <= start) {  // cannot happen (no branch matches empty); never loop forever
      const size_t len = one_char(pos);
      f(text.substr(pos, len));
      pos += len;
      continue;
    }
    f(text.substr(start, end - start));
    pos = end;
  }
}

GPT2Tokenizer::GPT2Tokenizer(const std::string& encoder_json_path, const std::string& vocab_bpe_path)
    : impl_(std::make_unique<Impl>()) {
  impl_->load_encoder(encoder_json_path);
  impl_->load_merges(vocab_bpe_path);
  impl_->compile_regex();
}

GPT2Tokenizer GPT2Tokenizer::from_dir(const std::string& dir) {
  const std::string enc = dir + "/encoder.json", bpe = dir + "/vocab.bpe";
  for (const std::string& p : {enc, bpe}) {
    std::ifstream f(p, std::ios::binary);
    if (!f)
      throw IOError(str(kTag, " ", p, ": cannot open: ", std::strerror(errno),
                        " (fetch GPT-2's files with: bash scripts/fetch_data.sh gpt2)"));
  }
  return GPT2Tokenizer(enc, bpe);
}

GPT2Tokenizer::GPT2Tokenizer(GPT2Tokenizer&&) noexcept = default;
GPT2Tokenizer& GPT2Tokenizer::operator=(GPT2Tokenizer&&) noexcept = default;
GPT2Tokenizer::~GPT2Tokenizer() = default;

void GPT2Tokenizer::encode_into(std::string_view text, std::vector<int32_t>& out) const {
  impl_->for_each_piece(text, [&](std::string_view piece) { impl_->encode_piece(piece, out); });
}

std::vector<int32_t> GPT2Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  encode_into(text, out);
  return out;
}

std::vector<std::string_view> GPT2Tokenizer::pretokenize(std::string_view text) const {
  std::vector<std::string_view> pieces;
  impl_->for_each_piece(text, [&](std::string_view piece) { pieces.push_back(piece); });
  return pieces;
}

const std::string& GPT2Tokenizer::token_bytes(int32_t id) const {
  EMBER_CHECK(id >= 0 && size_t(id) < impl_->id_to_bytes.size(), ValueError, kTag,
              " token id ", id, " outside the vocabulary [0, ", impl_->id_to_bytes.size(), ")");
  return impl_->id_to_bytes[size_t(id)];
}

std::string GPT2Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  out.reserve(ids.size() * 4);
  for (const int32_t id : ids) out += token_bytes(id);
  return out;
}

int32_t GPT2Tokenizer::eot_token() const { return impl_->eot; }
size_t GPT2Tokenizer::vocab_size() const { return impl_->id_to_bytes.size(); }
size_t GPT2Tokenizer::num_merges() const { return impl_->num_merges; }

}  // namespace ember::data
