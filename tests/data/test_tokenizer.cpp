// GPT2Tokenizer against the npm package gpt-3-encoder's own JS encoder, run under node at test
// time (tests/fixtures/gpt2_encode_reference.js) on ~3000 lines of the Brown corpus and tricky
// strings; decode(encode(s)) == s for seeded random byte strings; and every loader error.
// Needs data/gpt2 and data/brown (bash scripts/fetch_data.sh gpt2 brown; scripts/test.sh
// fetches them) and node; skips with that message without them.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include <unistd.h>

#include "ember/data/brown.h"
#include "ember/data/tokenizer.h"
#include "fuzz/harness_text.h"
#include "support/test_support.h"

namespace fs = std::filesystem;
using ember::data::GPT2Tokenizer;

namespace {

constexpr const char* kFetchHint = "run: bash scripts/fetch_data.sh gpt2 brown";

// data/<name> when scripts/fetch_data.sh has fetched it, else empty.
fs::path tok_fetched(const std::string& name, const std::string& probe) {
  for (fs::path p = fs::path(EMBER_TEST_DATA_DIR); !p.empty(); p = p.parent_path()) {
    if (fs::exists(p / "data" / name / probe)) return p / "data" / name;
    if (p == p.parent_path()) break;
  }
  return {};
}

std::string tok_slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

void tok_put(const fs::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary);
  f << bytes;
}

bool have_node() { return std::system("node --version >/dev/null 2>&1") == 0; }

// The tokenizer over data/gpt2, loaded once for the whole suite.
const GPT2Tokenizer* real_tokenizer() {
  static const std::unique_ptr<GPT2Tokenizer> tok = []() -> std::unique_ptr<GPT2Tokenizer> {
    const fs::path dir = tok_fetched("gpt2", "vocab.bpe");
    if (dir.empty()) return nullptr;
    return std::make_unique<GPT2Tokenizer>(GPT2Tokenizer::from_dir(dir.string()));
  }();
  return tok.get();
}

// Strings that exercise every branch of the pre-tokenization regex and the BPE.
std::vector<std::string> tricky_strings() {
  std::vector<std::string> s = {
      "",
      "Hello world",
      "Hello, world! How's it going? I'm fine; you're late, they've gone, we'll see, I'd go.",
      "'s 't 're 've 'm 'll 'd 'S 'T 'RE (caps are not contractions) ''quoted'' 'x",
      "don't DON'T can't won't y'all rock'n'roll o'clock",
      "Numbers: 0 1 12 123 1234 12345 3.14159 -42 1,000,000 1e10 0x1F 2024-05-20 10:30pm",
      "Multiple   spaces    here     and\ttabs\t\tand\n\nnewlines\n\n\n end",
      "   leading spaces and trailing spaces   ",
      "\n",
      " ",
      "  ",
      "\n\n\n",
      "line1\r\nline2\r\n",
      "a \n b \n\n c   \n",
      "word    ",
      "Unicode letters: caf\xc3\xa9 na\xc3\xafve r\xc3\xa9sum\xc3\xa9 \xc3\x9c" "ber stra\xc3\x9f" "e "
      "\xce\xb1\xce\xb2\xce\xb3 \xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82",
      "Emoji: \xf0\x9f\x98\x80\xf0\x9f\x98\x83 \xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd "
      "\xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7 \xe2\x9d\xa4\xef\xb8\x8f!",
      "CJK: \xe4\xbd\xa0\xe5\xa5\xbd\xef\xbc\x8c\xe4\xb8\x96\xe7\x95\x8c\xe3\x80\x82 "
      "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x81\xae\xe3\x83\x86\xe3\x82\xad\xe3\x82\xb9\xe3\x83\x88 "
      "\xed\x95\x9c\xea\xb5\xad\xec\x96\xb4",
      "Arabic \xd9\x85\xd8\xb1\xd8\xad\xd8\xa8\xd8\xa7 and Hindi \xe0\xa4\xa8\xe0\xa4\xae\xe0\xa4\xb8\xe0\xa5\x8d\xe0\xa4\xa4\xe0\xa5\x87",
      "Digits in other scripts: \xd9\xa1\xd9\xa2\xd9\xa3 \xe0\xa5\xa7\xe0\xa5\xa8 \xe2\x85\xa0\xe2\x85\xa1 \xc2\xbd",
      "Non-breaking\xc2\xa0space and em\xe2\x80\x83space and ideographic\xe3\x80\x80space",
      "Punctuation!!! ??? ... --- *** ((( ))) [[]] {{}} <<>> @@ ## $$ %% ^^ && __ ++ == || \\\\ //",
      "<|endoftext|> is just text here",
      "def f(x):\n    return x ** 2  # comment\n\nclass A:\n\tpass\n",
      "http://example.com/path?query=1&b=2#frag user@example.com",
      "Mixed\xe2\x80\x94" "dashes\xe2\x80\x93" "and \xe2\x80\x9csmart quotes\xe2\x80\x9d and \xe2\x80\x98single\xe2\x80\x99",
      "tab\tseparated\tvalues\t1\t2\t3",
      "  \t \n \t  x",
      "x\n\n\ny\n \n z",
  };
  // Long pieces take the heap BPE (pieces of 48+ bytes): compare them with node too.
  s.push_back(std::string(300, 'a'));
  s.push_back(" " + std::string(200, 'z') + "qq" + std::string(100, 'e'));
  std::string word;
  for (int i = 0; i < 40; ++i) word += "antidisestablishmentarianism"[i % 28];
  s.push_back(word + word + word);
  s.push_back(std::string(500, '9') + " " + std::string(333, '.') + std::string(100, ' ') + "x");
  s.push_back("supercalifragilisticexpialidocious" "pneumonoultramicroscopicsilicovolcanoconiosis"
              "honorificabilitudinitatibus");
  std::string cjk;
  for (int i = 0; i < 60; ++i) cjk += "\xe4\xb8\xad\xe6\x96\x87";
  s.push_back(cjk);
  return s;
}

// Every 19th sentence of the untagged Brown corpus (about 3000, from all 15 categories) and 40
// multi-sentence paragraphs (newlines inside).
std::vector<std::string> brown_lines(const fs::path& dir) {
  std::vector<std::string> lines, out;
  for (const std::string& f : ember::data::brown_files(dir.string())) {
    std::istringstream text(ember::data::brown_untag(tok_slurp(f)));
    for (std::string line; std::getline(text, line);) lines.push_back(line);
  }
  for (size_t i = 0; i < lines.size(); i += 19) out.push_back(lines[i]);
  for (size_t i = 7; i + 5 < lines.size() && out.size() < 3000 + 40 + lines.size() / 19; i += lines.size() / 40) {
    out.push_back(lines[i] + "\n" + lines[i + 1] + "\n\n" + lines[i + 2] + "  " + lines[i + 3] + "\n");
  }
  return out;
}

// node's token ids for each text, or an empty optional with a reason.
std::vector<std::vector<int32_t>> node_encode(const fs::path& gpt2_dir,
                                              const std::vector<std::string>& texts) {
  const fs::path tmp = fs::temp_directory_path() /
                       ("ember_tok_ref_" + std::to_string(::getpid()));
  fs::create_directories(tmp);
  tok_put(tmp / "in.json", nlohmann::json(texts).dump());
  const std::string script = std::string(EMBER_TEST_DATA_DIR) + "/gpt2_encode_reference.js";
  const std::string cmd = "node '" + script + "' '" + gpt2_dir.string() + "' '" +
                          (tmp / "in.json").string() + "' '" + (tmp / "out.txt").string() + "'";
  const int rc = std::system(cmd.c_str());
  std::vector<std::vector<int32_t>> ids;
  if (rc == 0) {
    std::istringstream out(tok_slurp(tmp / "out.txt"));
    for (std::string line; std::getline(out, line);) {
      std::istringstream l(line);
      std::vector<int32_t> v;
      for (int32_t x; l >> x;) v.push_back(x);
      ids.push_back(std::move(v));
    }
  }
  fs::remove_all(tmp);
  EXPECT_EQ(rc, 0) << "node failed: " << cmd;
  return ids;
}

std::string show(const std::vector<int32_t>& v) {
  std::ostringstream s;
  for (size_t i = 0; i < v.size(); ++i) s << (i ? " " : "") << v[i];
  return s.str();
}

}  // namespace

TEST(Tokenizer, MatchesNodeEncoderOnBrownAndTrickyStrings) {
  const GPT2Tokenizer* tok = real_tokenizer();
  const fs::path brown = tok_fetched("brown", "ca01");
  if (!tok || brown.empty()) GTEST_SKIP() << "GPT-2 files or Brown corpus missing: " << kFetchHint;
  if (!have_node()) GTEST_SKIP() << "node not found (the reference encoder runs under node)";

  std::vector<std::string> texts = tricky_strings();
  const size_t num_tricky = texts.size();
  for (std::string& l : brown_lines(brown)) texts.push_back(std::move(l));
  ASSERT_GT(texts.size(), 3000u);

  const auto expected = node_encode(tok_fetched("gpt2", "Encoder.js"), texts);
  ASSERT_EQ(expected.size(), texts.size());
  size_t matched = 0, tokens = 0, shown = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::vector<int32_t> got = tok->encode(texts[i]);
    tokens += got.size();
    if (got == expected[i]) {
      ++matched;
    } else if (shown++ < 10) {
      ADD_FAILURE() << (i < num_tricky ? "tricky string " : "Brown text ") << i << ": \""
                    << texts[i] << "\"\n  ember: " << show(got) << "\n  node:  " << show(expected[i]);
    }
    EXPECT_EQ(tok->decode(got), texts[i]);
  }
  std::printf("[tokenizer] %zu of %zu texts (%zu tricky, %zu tokens) equal node's gpt-3-encoder\n",
              matched, texts.size(), num_tricky, tokens);
  EXPECT_EQ(matched, texts.size());
}

TEST(Tokenizer, FactsOfGpt2Files) {
  const GPT2Tokenizer* tok = real_tokenizer();
  if (!tok) GTEST_SKIP() << "GPT-2 files missing: " << kFetchHint;
  // As node's encoder.json says (vocab.bpe: "#version" + 50000 merges).
  const auto enc = nlohmann::json::parse(tok_slurp(tok_fetched("gpt2", "encoder.json") / "encoder.json"));
  EXPECT_EQ(tok->vocab_size(), enc.size());
  EXPECT_EQ(tok->eot_token(), enc.at("<|endoftext|>").get<int32_t>());
  EXPECT_EQ(tok->num_merges(), enc.size() - 257);
  const std::vector<int32_t> eot = {tok->eot_token()};
  EXPECT_EQ(tok->decode(eot), "<|endoftext|>");
  // The special token is never made from text.
  const auto ids = tok->encode("<|endoftext|>");
  EXPECT_GT(ids.size(), 1u);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), tok->eot_token()), 0);
  EXPECT_THROW(tok->decode(std::vector<int32_t>{int32_t(tok->vocab_size())}), ember::ValueError);
  EXPECT_THROW(tok->decode(std::vector<int32_t>{-1}), ember::ValueError);
}

TEST(Tokenizer, RoundTripsRandomBytes) {
  const GPT2Tokenizer* tok = real_tokenizer();
  if (!tok) GTEST_SKIP() << "GPT-2 files missing: " << kFetchHint;
  std::mt19937_64 rng(20240520);
  const std::vector<std::string> fragments = {
      " ", "  ", "\n", "\t", "'s", "'", "a", "Z", "7", ".", "\xc3\xa9", "\xe4\xb8\xad",
      "\xf0\x9f\x98\x80", "\xc2\xa0", "\xe2\x80\x83", "\xc2\x85", "\xef\xbb\xbf",
      "\xc3", "\xe4\xb8", "\xf0\x9f\x98", "\x80", "\xbf", "\xff", "\xfe", "\xc0\xaf",  // invalid
      "\xed\xa0\x80", "\xf4\x90\x80\x80", std::string(1, '\0')};
  size_t total = 0, invalid_utf8 = 0;
  for (int n = 0; n < 3000; ++n) {
    std::string s;
    const int len = int(rng() % 120);
    const int mode = n % 3;
    for (int i = 0; i < len; ++i) {
      if (mode == 0) s.push_back(char(rng() % 256));                  // uniform bytes
      else if (mode == 1) s += fragments[rng() % fragments.size()];  // tokenizer edge pieces
      else s.push_back(char(rng() % 2 ? 0x80 + rng() % 64 : 0x20 + rng() % 96));
    }
    const auto ids = tok->encode(s);
    for (const int32_t id : ids) ASSERT_TRUE(id >= 0 && size_t(id) < tok->vocab_size());
    ASSERT_EQ(tok->decode(ids), s) << "random string " << n;
    // The pieces cover the input exactly, in order.
    std::string joined;
    for (const auto p : tok->pretokenize(s)) joined += p;
    ASSERT_EQ(joined, s);
    total += s.size();
    invalid_utf8 += mode != 1;
  }
  EXPECT_GT(total, 100000u);
  // Pathological sizes: one huge piece of each kind (heap BPE, long whitespace runs).
  for (const std::string& big : {std::string(1 << 20, ' '), std::string(1 << 18, 'a'),
                                 std::string(1 << 18, '\xff'), std::string(1 << 17, '!') + "x"}) {
    const auto ids = tok->encode(big);
    EXPECT_EQ(tok->decode(ids), big);
  }
}

TEST(Tokenizer, ThreadsAgreeAndThroughput) {
  const GPT2Tokenizer* tok = real_tokenizer();
  const fs::path brown = tok_fetched("brown", "ca01");
  if (!tok || brown.empty()) GTEST_SKIP() << "GPT-2 files or Brown corpus missing: " << kFetchHint;
  std::string text;
  for (const std::string& f : ember::data::brown_files(brown.string())) {
    text += ember::data::brown_untag(tok_slurp(f));
    if (text.size() > (4u << 20)) break;
  }
  // A fresh tokenizer (empty cache) for the throughput figure.
  const GPT2Tokenizer fresh = GPT2Tokenizer::from_dir(tok_fetched("gpt2", "vocab.bpe").string());
  const auto t0 = std::chrono::steady_clock::now();
  const auto ids = fresh.encode(text);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[tokenizer] %.2f MB of Brown text -> %zu tokens in %.3f s: %.1f MB/s\n",
              text.size() / 1e6, ids.size(), s, text.size() / 1e6 / s);
  EXPECT_EQ(fresh.decode(ids), text);
  EXPECT_EQ(ids, tok->encode(text));

  const std::string part = text.substr(0, 300000);
  const auto want = fresh.encode(part);
  std::vector<std::vector<int32_t>> got(4);
  {
    std::vector<std::thread> threads;
    const GPT2Tokenizer cold = GPT2Tokenizer::from_dir(tok_fetched("gpt2", "vocab.bpe").string());
    for (int t = 0; t < 4; ++t) threads.emplace_back([&, t] { got[size_t(t)] = cold.encode(part); });
    for (auto& th : threads) th.join();
  }
  for (const auto& g : got) EXPECT_EQ(g, want);
}

// ---- loader errors, on a tiny vocabulary written here ----

namespace {

// GPT-2's bytes_to_unicode, written out independently of the library: the character that
// stands for byte b in encoder.json / vocab.bpe, as UTF-8.
std::string byte_char(int b) {
  const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
  int cp = b;
  if (!printable) {
    int n = 0;
    for (int x = 0; x < b; ++x)
      if (!((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE))) ++n;
    cp = 256 + n;
  }
  std::string s;
  if (cp < 0x80) s.push_back(char(cp));
  else { s.push_back(char(0xC0 | cp >> 6)); s.push_back(char(0x80 | (cp & 0x3F))); }
  return s;
}
std::string chars(const std::string& bytes) {
  std::string s;
  for (unsigned char c : bytes) s += byte_char(c);
  return s;
}

class TokenizerFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ember_tok_files_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    // 256 bytes, merges "h e" -> "he", "l l" -> "ll", "he ll" -> "hell", " w" -> " w", eot.
    merges_ = {{"h", "e"}, {"l", "l"}, {"he", "ll"}, {" ", "w"}};
    vocab_ = nlohmann::json::object();
    for (int b = 0; b < 256; ++b) vocab_[byte_char(b)] = b;
    int id = 256;
    for (const auto& [a, b] : merges_) vocab_[chars(a + b)] = id++;
    vocab_["<|endoftext|>"] = id;
    write_good();
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string enc() const { return (dir_ / "encoder.json").string(); }
  std::string bpe() const { return (dir_ / "vocab.bpe").string(); }
  std::string good_bpe() const {
    std::string s = "#version: 0.2\n";
    for (const auto& [a, b] : merges_) s += chars(a) + " " + chars(b) + "\n";
    return s;
  }
  void write_good() {
    tok_put(enc(), vocab_.dump());
    tok_put(bpe(), good_bpe());
  }
  std::string error() const {
    return ember::test::message_of<ember::IOError>([&] { GPT2Tokenizer t(enc(), bpe()); });
  }
  fs::path dir_;
  std::vector<std::pair<std::string, std::string>> merges_;
  nlohmann::json vocab_;
};

}  // namespace

TEST_F(TokenizerFiles, SmallVocabularyEncodes) {
  GPT2Tokenizer tok(enc(), bpe());
  EXPECT_EQ(tok.vocab_size(), 261u);
  EXPECT_EQ(tok.eot_token(), 260);
  EXPECT_EQ(tok.num_merges(), 4u);
  // "hello world": pieces "hello", " world"; BPE: h e -> he, l l -> ll, he ll -> hell, + o;
  // " w" + o r l d.
  const auto ids = tok.encode("hello world");
  const int32_t hell = vocab_[chars("hell")].get<int32_t>(), w = vocab_[chars(" w")].get<int32_t>();
  const std::vector<int32_t> want = {hell, 'o', w, 'o', 'r', 'l', 'd'};
  EXPECT_EQ(ids, want);
  EXPECT_EQ(tok.decode(ids), "hello world");
}

TEST_F(TokenizerFiles, MissingFilesNameThePathAndTheFetchCommand) {
  fs::remove(enc());
  std::string msg = error();
  EXPECT_NE(msg.find(enc()), std::string::npos) << msg;
  EXPECT_NE(msg.find("cannot open"), std::string::npos) << msg;
  msg = ember::test::message_of<ember::IOError>([&] { GPT2Tokenizer::from_dir(dir_.string()); });
  EXPECT_NE(msg.find("fetch_data.sh gpt2"), std::string::npos) << msg;
  write_good();
  fs::remove(bpe());
  msg = error();
  EXPECT_NE(msg.find(bpe()), std::string::npos) << msg;
}

TEST_F(TokenizerFiles, BadEncoderJson) {
  const std::string good = vocab_.dump();
  struct Case {
    std::string content, expect;
  };
  nlohmann::json gap = vocab_, dup = vocab_, alien = vocab_, nobyte = vocab_, str_id = vocab_;
  gap["<|endoftext|>"] = 9999;
  dup["<|endoftext|>"] = 3;
  alien["\xe2\x82\xac"] = 261;  // U+20AC is no byte's character
  nobyte.erase(byte_char('q'));
  nobyte["qq"] = int('q');
  str_id["<|endoftext|>"] = "260";
  const std::vector<Case> cases = {
      {"", "empty file"},
      {good.substr(0, good.size() / 2), "malformed JSON"},
      {"[1, 2, 3]", "expected a JSON object"},
      {"{}", "no tokens"},
      {gap.dump(), "outside [0, 261)"},
      {dup.dump(), "id 3 is given to two tokens"},
      {alien.dump(), "U+20AC is not in GPT-2's byte alphabet"},
      {nobyte.dump(), "no token for the single byte 113"},
      {str_id.dump(), "expected an integer id"},
  };
  for (const auto& c : cases) {
    tok_put(enc(), c.content);
    const std::string msg = error();
    EXPECT_NE(msg.find(enc()), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.expect), std::string::npos) << "want \"" << c.expect << "\" in: " << msg;
  }
  // Without "<|endoftext|>" but with dense ids.
  nlohmann::json dense = vocab_;
  dense.erase("<|endoftext|>");
  tok_put(enc(), dense.dump());
  EXPECT_NE(error().find("no \"<|endoftext|>\" token"), std::string::npos) << error();
}

TEST_F(TokenizerFiles, BadMerges) {
  const std::string good = good_bpe();
  struct Case {
    std::string content, expect;
  };
  const std::vector<Case> cases = {
      {"", "empty file"},
      {"h e\nl l\n", "line 1: expected the \"#version"},
      {"#version: 0.2\nh e\nl\n", "line 3: expected two symbols"},
      {"#version: 0.2\nh e x\n", "line 2: expected two symbols"},
      {"#version: 0.2\nh e\nl l\nhe ll\n" + chars(" ") + " w\nq z\n", "line 6: the merge \"qz\" is not"},
      {"#version: 0.2\nh e\nl l\nhe ll\nhel l\n", "line 5: symbol \"hel\" is not"},
      {"#version: 0.2\nh e\n\xe2\x82\xac l\n", "line 3: symbol \"\xe2\x82\xac\" has character U+20AC"},
      {"#version: 0.2\nh e\n\xff l\n", "line 3: invalid UTF-8"},
      {good.substr(0, good.rfind('\n', good.size() - 2) + 1), "has 3 merges but the encoder's 261 tokens need 4"},
  };
  for (const auto& c : cases) {
    tok_put(bpe(), c.content);
    const std::string msg = error();
    EXPECT_NE(msg.find(bpe()), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.expect), std::string::npos) << "want \"" << c.expect << "\" in: " << msg;
  }
  // CRLF line ends and a missing final newline are fine.
  std::string crlf;
  for (const char ch : good) crlf += ch == '\n' ? std::string("\r\n") : std::string(1, ch);
  tok_put(bpe(), crlf.substr(0, crlf.size() - 2));
  EXPECT_NO_THROW(GPT2Tokenizer(enc(), bpe()));
}

// ---- the fuzz target's kept inputs (seeds and minimized crashes), replayed in CI ----

namespace {
void replay_tok_inputs(const std::string& target, void (*run)(const uint8_t*, size_t)) {
  const fs::path dir = fs::path(EMBER_TEST_DATA_DIR) / "fuzz" / target;
  std::vector<fs::path> files;
  if (fs::is_directory(dir))
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_regular_file()) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  ASSERT_FALSE(files.empty()) << "no inputs in tests/fixtures/fuzz/" << target;
  for (const auto& f : files) {
    SCOPED_TRACE(f.string());
    const std::string bytes = tok_slurp(f);
    EXPECT_NO_THROW(run(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
  }
  fs::remove_all(ember_fuzz::scratch_dir());
}
}  // namespace

TEST(FuzzRegressions, TokenizerFiles) {
  replay_tok_inputs("fuzz_tokenizer_files", ember_fuzz::run_tokenizer_files);
}
