// TokenShards over shards written here byte by byte (llm.c's layout: 256 int32 header, uint16
// tokens), whose tokens encode (file, offset) so every row can be traced back to the window it
// came from: windows and shifting, sequential order and wrap-around, seeded shuffling,
// resume via set_position, rank slices, path forms, and every error.
#include <climits>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>

#include <sys/wait.h>
#include <unistd.h>

#include "ember/data/token_shards.h"
#include "fuzz/harness_text.h"
#include "support/test_support.h"

namespace fs = std::filesystem;
using ember::Tensor;
using ember::data::TokenShards;
using ember::data::TokenShardsOptions;

namespace {

// A shard file: header ints (magic, version, count unless overridden), then the tokens.
void write_shard(const fs::path& p, const std::vector<uint16_t>& tokens, int32_t magic = 20240520,
                 int32_t version = 1, int64_t count = INT64_MIN) {
  std::vector<int32_t> header(256, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = int32_t(count == INT64_MIN ? int64_t(tokens.size()) : count);
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(header.data()), 1024);
  f.write(reinterpret_cast<const char*>(tokens.data()), std::streamsize(tokens.size() * 2));
}

// File i's tokens: 1000 * (i + 1) + offset, so a token names its file and position.
std::vector<uint16_t> tokens_of(int file, int n) {
  std::vector<uint16_t> t(static_cast<size_t>(n));
  for (int k = 0; k < n; ++k) t[size_t(k)] = uint16_t(1000 * (file + 1) + k);
  return t;
}

std::vector<int64_t> row(const Tensor& t, int64_t b) {
  const int64_t T = t.size(1);
  const int64_t* p = t.data_ptr<int64_t>() + b * T;
  return {p, p + T};
}

class TokenShardsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ember_shards_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  // Three files of 21, 13 and 50 tokens.
  void write_three(const std::string& prefix = "s_") {
    sizes_ = {21, 13, 50};
    for (int i = 0; i < 3; ++i) write_shard(path(prefix + std::to_string(i) + ".bin"), tokens_of(i, sizes_[size_t(i)]));
  }
  // Checks that every row of (x, y) is a window of T+1 consecutive tokens of one file and
  // returns (file, start) per row.
  std::vector<std::pair<int, int>> windows(const std::pair<Tensor, Tensor>& batch, int64_t T) {
    const auto& [x, y] = batch;
    EXPECT_EQ(x.dtype(), ember::DType::i64);
    EXPECT_EQ(x.sizes(), (ember::Shape{x.size(0), T}));
    EXPECT_EQ(y.sizes(), x.sizes());
    EXPECT_TRUE(x.device().is_cpu());
    std::vector<std::pair<int, int>> out;
    for (int64_t b = 0; b < x.size(0); ++b) {
      const auto xr = row(x, b), yr = row(y, b);
      const int file = int(xr[0] / 1000) - 1, start = int(xr[0] % 1000);
      EXPECT_GE(file, 0);
      EXPECT_LE(start + T + 1, sizes_.at(size_t(file))) << "window past the end of its file";
      for (int64_t t = 0; t < T; ++t) {
        EXPECT_EQ(xr[size_t(t)], 1000 * (file + 1) + start + t);
        EXPECT_EQ(yr[size_t(t)], 1000 * (file + 1) + start + t + 1);  // shifted by one
      }
      out.emplace_back(file, start);
    }
    return out;
  }
  fs::path dir_;
  std::vector<int> sizes_;
};

}  // namespace

TEST_F(TokenShardsTest, SequentialWalksFilesInOrderAndWraps) {
  write_three();
  TokenShards ds(dir_.string(), {.batch_size = 2, .seq_len = 4, .shuffle = false});
  EXPECT_EQ(ds.num_tokens(), 21 + 13 + 50);
  ASSERT_EQ(ds.files().size(), 3u);
  // Windows at offsets 0, 4, 8, ... with start + 5 <= size: 5 + 3 + 12 = 20.
  EXPECT_EQ(ds.windows_per_epoch(), 20);
  EXPECT_EQ(ds.batches_per_epoch(), 10);
  std::vector<std::pair<int, int>> want;
  for (int f = 0; f < 3; ++f)
    for (int s = 0; s + 5 <= sizes_[size_t(f)]; s += 4) want.emplace_back(f, s);
  ASSERT_EQ(want.size(), 20u);
  std::vector<std::pair<int, int>> got;
  for (int step = 0; step < 15; ++step)  // one and a half passes
    for (const auto& w : windows(ds.next(), 4)) got.push_back(w);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], want[i % 20]) << "row " << i;
  EXPECT_EQ(ds.position(), 15);
}

TEST_F(TokenShardsTest, SingleFileExactContent) {
  std::vector<uint16_t> t(40);
  for (size_t i = 0; i < t.size(); ++i) t[i] = uint16_t(65535 - 977 * i % 65536);
  write_shard(path("one.bin"), t);
  TokenShards ds(path("one.bin"), {.batch_size = 3, .seq_len = 8, .shuffle = false});
  auto [x, y] = ds.next();
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t s = 0; s < 8; ++s) {
      EXPECT_EQ(row(x, b)[size_t(s)], t[size_t(b * 8 + s)]);
      EXPECT_EQ(row(y, b)[size_t(s)], t[size_t(b * 8 + s + 1)]);
    }
}

TEST_F(TokenShardsTest, ShuffleIsSeededUniformAndResumable) {
  write_three();
  const TokenShardsOptions opt{.batch_size = 4, .seq_len = 6, .shuffle = true, .seed = 7};
  TokenShards a(dir_.string(), opt), b(dir_.string(), opt);
  std::vector<std::vector<std::pair<int, int>>> run;
  std::map<std::pair<int, int>, int> hits;
  for (int step = 0; step < 3000; ++step) {
    auto w = windows(a.next(), 6);
    EXPECT_EQ(w, windows(b.next(), 6)) << "same seed, same batches";
    for (const auto& x : w) ++hits[x];
    if (step < 12) run.push_back(std::move(w));
  }
  // Every start of every file is drawn, about equally (12000 draws over 15 + 7 + 44 = 66).
  ASSERT_EQ(hits.size(), 66u);
  for (const auto& [w, n] : hits) {
    EXPECT_GT(n, 12000 / 66 / 2) << w.first << ":" << w.second;
    EXPECT_LT(n, 12000 / 66 * 2) << w.first << ":" << w.second;
  }
  // A different seed draws different windows.
  TokenShardsOptions other = opt;
  other.seed = 8;
  TokenShards c(dir_.string(), other);
  EXPECT_NE(windows(c.next(), 6), run[0]);
  // Resume: a fresh loader at position 5 continues with batches 5, 6, ...
  TokenShards resumed(dir_.string(), opt);
  resumed.set_position(5);
  for (int step = 5; step < 12; ++step) EXPECT_EQ(windows(resumed.next(), 6), run[size_t(step)]);
  EXPECT_EQ(resumed.position(), 12);
  resumed.reset();
  EXPECT_EQ(resumed.position(), 0);
  EXPECT_EQ(windows(resumed.next(), 6), run[0]);
  // Batches within one run differ (not one window repeated).
  EXPECT_NE(run[0], run[1]);
}

TEST_F(TokenShardsTest, RanksTakeDisjointSlicesOfOneGlobalBatch) {
  write_three();
  for (const bool shuffle : {false, true}) {
    SCOPED_TRACE(shuffle ? "shuffle" : "sequential");
    TokenShards global(dir_.string(), {.batch_size = 6, .seq_len = 3, .shuffle = shuffle, .seed = 3});
    std::vector<TokenShards> ranks;
    for (int r = 0; r < 3; ++r)
      ranks.emplace_back(dir_.string(), TokenShardsOptions{.batch_size = 2, .seq_len = 3, .shuffle = shuffle,
                                                           .seed = 3, .rank = r, .world_size = 3});
    std::set<std::pair<int, int>> seen_epoch;
    for (int step = 0; step < 20; ++step) {
      const auto want = windows(global.next(), 3);
      std::vector<std::pair<int, int>> got;
      for (auto& r : ranks)
        for (const auto& w : windows(r.next(), 3)) got.push_back(w);
      EXPECT_EQ(got, want) << "step " << step;
      if (!shuffle && step < global.batches_per_epoch() - 1) {
        for (const auto& w : got) EXPECT_TRUE(seen_epoch.insert(w).second) << "window used twice in an epoch";
      }
    }
    // Resuming one rank alone matches it too.
    TokenShards r1(dir_.string(), {.batch_size = 2, .seq_len = 3, .shuffle = shuffle, .seed = 3, .rank = 1,
                                   .world_size = 3});
    r1.set_position(19);
    ranks[1].set_position(19);
    EXPECT_EQ(windows(r1.next(), 3), windows(ranks[1].next(), 3));
  }
}

TEST_F(TokenShardsTest, PathForms) {
  write_three("train_");
  write_shard(path("val_0.bin"), tokens_of(5, 30));
  write_shard(path("notes.txt"), tokens_of(6, 30));
  EXPECT_EQ(TokenShards(dir_.string(), {.seq_len = 4}).files().size(), 4u);  // *.bin only
  const TokenShards train(path("train_*.bin"), {.seq_len = 4});
  ASSERT_EQ(train.files().size(), 3u);
  EXPECT_EQ(train.files()[0], path("train_0.bin"));
  EXPECT_EQ(train.files()[2], path("train_2.bin"));
  EXPECT_EQ(train.num_tokens(), 84);
  const TokenShards val(path("val_0.bin"), {.seq_len = 4});
  EXPECT_EQ(val.num_tokens(), 30);
}

TEST_F(TokenShardsTest, VocabBound) {
  std::vector<uint16_t> t = tokens_of(0, 20);
  t[13] = 50257;
  write_shard(path("v.bin"), t);
  TokenShards ok(path("v.bin"), {.batch_size = 1, .seq_len = 19, .shuffle = false});
  EXPECT_EQ(row(ok.next().first, 0)[13], 50257);
  TokenShards bounded(path("v.bin"), {.batch_size = 1, .seq_len = 19, .shuffle = false, .vocab_size = 50257});
  const std::string msg = ember::test::message_of<ember::IOError>([&] { bounded.next(); });
  EXPECT_NE(msg.find(path("v.bin")), std::string::npos) << msg;
  EXPECT_NE(msg.find("token 50257 at index 13 is outside the vocabulary of 50257"), std::string::npos) << msg;
}

TEST_F(TokenShardsTest, ErrorsNameTheFile) {
  struct Case {
    std::string name;
    std::function<void(const std::string&)> write;
    std::string expect;
  };
  const auto good = tokens_of(0, 30);
  const std::vector<Case> cases = {
      {"magic.bin", [&](const std::string& p) { write_shard(p, good, 20240521); }, "bad magic number 20240521"},
      {"version.bin", [&](const std::string& p) { write_shard(p, good, 20240520, 2); }, "unsupported version 2"},
      {"long.bin", [&](const std::string& p) { write_shard(p, good, 20240520, 1, 29); },
       "the header says 29 tokens (1082 bytes) but the file has 1084 bytes"},
      {"trunc.bin", [&](const std::string& p) { write_shard(p, good, 20240520, 1, 31); },
       "the header says 31 tokens (1086 bytes) but the file has 1084 bytes (truncated)"},
      {"neg.bin", [&](const std::string& p) { write_shard(p, good, 20240520, 1, -5); }, "negative token count -5"},
      {"header.bin", [&](const std::string& p) { std::ofstream(p, std::ios::binary) << std::string(100, '\0'); },
       "truncated: 100 bytes, fewer than the 1024-byte header"},
      {"empty.bin", [&](const std::string& p) { std::ofstream(p, std::ios::binary).flush(); },
       "truncated: 0 bytes"},
      {"short.bin", [&](const std::string& p) { write_shard(p, tokens_of(0, 8)); },
       "too short: 8 tokens, fewer than one window of seq_len + 1 = 9"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string p = path(c.name);
    c.write(p);
    const std::string msg = ember::test::message_of<ember::IOError>(
        [&] { TokenShards(p, {.batch_size = 2, .seq_len = 8}); });
    EXPECT_NE(msg.find(p), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.expect), std::string::npos) << "want \"" << c.expect << "\" in: " << msg;
    // In a folder with good shards, the bad one still fails the whole set, by name.
    fs::remove(p);
  }
  write_shard(path("a_good.bin"), good);
  write_shard(path("b_bad.bin"), good, 7);
  std::string msg = ember::test::message_of<ember::IOError>([&] { TokenShards(dir_.string(), {.seq_len = 8}); });
  EXPECT_NE(msg.find(path("b_bad.bin")), std::string::npos) << msg;

  // Paths that hold no shards.
  msg = ember::test::message_of<ember::IOError>([&] { TokenShards(path("missing.bin"), {}); });
  EXPECT_NE(msg.find("no such file or folder"), std::string::npos) << msg;
  msg = ember::test::message_of<ember::IOError>([&] { TokenShards(path("zzz_*.bin"), {}); });
  EXPECT_NE(msg.find("no file matches the pattern"), std::string::npos) << msg;
  fs::create_directories(dir_ / "empty");
  msg = ember::test::message_of<ember::IOError>([&] { TokenShards(path("empty"), {}); });
  EXPECT_NE(msg.find("no *.bin token shards"), std::string::npos) << msg;

  // Bad options.
  write_shard(path("ok.bin"), good);
  EXPECT_THROW(TokenShards(path("ok.bin"), {.batch_size = 0}), ember::ValueError);
  EXPECT_THROW(TokenShards(path("ok.bin"), {.seq_len = 0}), ember::ValueError);
  EXPECT_THROW(TokenShards(path("ok.bin"), {.seq_len = 4, .rank = 2, .world_size = 2}), ember::ValueError);
  EXPECT_THROW(TokenShards(path("ok.bin"), {.seq_len = 4, .vocab_size = 70000}), ember::ValueError);
  TokenShards ok(path("ok.bin"), {.seq_len = 4});
  EXPECT_THROW(ok.set_position(-1), ember::ValueError);
}

TEST_F(TokenShardsTest, ShrunkFileIsAnIOErrorAtRead) {
  write_shard(path("s.bin"), tokens_of(0, 100));
  TokenShards ds(path("s.bin"), {.batch_size = 1, .seq_len = 90, .shuffle = false});
  fs::resize_file(path("s.bin"), 1024 + 50);
  const std::string msg = ember::test::message_of<ember::IOError>([&] { ds.next(); });
  EXPECT_NE(msg.find(path("s.bin")), std::string::npos) << msg;
  EXPECT_NE(msg.find("unexpected end of file"), std::string::npos) << msg;
}

// The fuzz target's kept inputs (seeds and minimized crashes), replayed in CI.
TEST(FuzzRegressions, TokenShards) {
  const fs::path dir = fs::path(EMBER_TEST_DATA_DIR) / "fuzz" / "fuzz_token_shards";
  std::vector<fs::path> files;
  if (fs::is_directory(dir))
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_regular_file()) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  ASSERT_FALSE(files.empty()) << "no inputs in " << dir;
  for (const auto& f : files) {
    SCOPED_TRACE(f.string());
    std::ifstream in(f, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NO_THROW(ember_fuzz::run_token_shards(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
  }
  fs::remove_all(ember_fuzz::scratch_dir());
}

// ---- build/bin/gpt-prepare, run as a user would (beside this test binary in the build) ----

namespace {

fs::path gpt_prepare_binary() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  const fs::path bin = self.parent_path() / "gpt-prepare";
  return fs::exists(bin) ? bin : fs::path();
}

fs::path gpt2_files() {
  for (fs::path p = fs::path(EMBER_TEST_DATA_DIR); !p.empty(); p = p.parent_path()) {
    if (fs::exists(p / "data" / "gpt2" / "vocab.bpe")) return p / "data" / "gpt2";
    if (p == p.parent_path()) break;
  }
  return {};
}

// Runs a command; returns its exit status and puts stdout+stderr in `out`.
int run_command(const std::string& cmd, std::string& out) {
  ember::test::ProcessResult r = ember::test::run_command(cmd);
  out = std::move(r.output);
  return r.status;
}

// A shard's tokens, parsed here (not through TokenShards), with its header checked.
std::vector<uint16_t> read_shard_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::vector<int32_t> header(256);
  f.read(reinterpret_cast<char*>(header.data()), 1024);
  EXPECT_EQ(header[0], 20240520) << p;
  EXPECT_EQ(header[1], 1) << p;
  EXPECT_EQ(fs::file_size(p), 1024 + 2 * uint64_t(header[2])) << p;
  std::vector<uint16_t> t(static_cast<size_t>(std::max(header[2], 0)));
  f.read(reinterpret_cast<char*>(t.data()), std::streamsize(t.size() * 2));
  return t;
}

}  // namespace

TEST_F(TokenShardsTest, GptPrepareWritesEotPrefixedDocumentsInShards) {
  const fs::path bin = gpt_prepare_binary(), gpt2 = gpt2_files();
  if (bin.empty()) GTEST_SKIP() << "build/bin/gpt-prepare not built";
  if (gpt2.empty()) GTEST_SKIP() << "GPT-2 files missing: run: bash scripts/fetch_data.sh gpt2 brown";
  std::vector<std::string> docs = {
      "First document.\nIt has two lines, and 'quotes'.\n",
      "Second: caf\xc3\xa9, 12345, \xe4\xb8\xad\xe6\x96\x87 and   spaces.",
      "Third one is a little longer than the others, so that it spans more than one shard of "
      "fifty tokens when the shard size is small enough to split it. The end."};
  for (int i = 0; i < 3; ++i) docs[2] += docs[2];  // several shards of train tokens
  fs::create_directories(dir_ / "in");
  for (size_t i = 0; i < docs.size(); ++i) {
    std::ofstream f(dir_ / "in" / ("doc" + std::to_string(i) + ".txt"), std::ios::binary);
    f << docs[i];
  }
  const fs::path out = dir_ / "out";
  auto cmd = [&](int shard_size) {
    return "'" + bin.string() + "' '" + (dir_ / "in").string() + "' --gpt2 '" + gpt2.string() + "' --out '" +
           out.string() + "' --name t --shard-size " + std::to_string(shard_size) +
           " --val-fraction 0.34 --no-shuffle --quiet";
  };
  std::string log;
  ASSERT_EQ(run_command(cmd(50), log), 0) << log;
  EXPECT_NE(log.find("result: {"), std::string::npos) << log;

  const auto tok = ember::data::GPT2Tokenizer::from_dir(gpt2.string());
  // val: document 0; train: documents 1 and 2, each prefixed with <|endoftext|>.
  std::vector<int32_t> want_val = {tok.eot_token()}, want_train = {tok.eot_token()};
  tok.encode_into(docs[0], want_val);
  tok.encode_into(docs[1], want_train);
  want_train.push_back(tok.eot_token());
  tok.encode_into(docs[2], want_train);
  auto collect = [&](const std::string& split, size_t want_size) {
    std::vector<int32_t> all;
    size_t shards = 0;
    for (int i = 0; fs::exists(out / ("t_" + split + "_" + std::string(5, '0') + std::to_string(i) + ".bin")); ++i) {
      const auto t = read_shard_file(out / ("t_" + split + "_" + std::string(5, '0') + std::to_string(i) + ".bin"));
      // 50 tokens a shard; the last one absorbs a remainder below 25.
      all.insert(all.end(), t.begin(), t.end());
      ++shards;
      if (all.size() < want_size) EXPECT_EQ(t.size(), 50u);
      else EXPECT_TRUE(t.size() >= std::min<size_t>(25, want_size) && t.size() < 75) << t.size();
    }
    const size_t full = want_size / 50, rest = want_size % 50;
    EXPECT_EQ(shards, full == 0 ? 1 : (rest >= 25 ? full + 1 : full)) << split;
    std::printf("[gpt-prepare] %s: %zu tokens in %zu shards\n", split.c_str(), all.size(), shards);
    return all;
  };
  EXPECT_EQ(collect("val", want_val.size()), want_val);
  EXPECT_EQ(collect("train", want_train.size()), want_train);
  // TokenShards reads them back through the pattern form.
  TokenShards train(out.string() + "/t_train_*.bin", {.batch_size = 1, .seq_len = 8, .shuffle = false});
  EXPECT_EQ(train.num_tokens(), int64_t(want_train.size()));

  // A second run with a bigger shard size replaces the first run's shards.
  ASSERT_EQ(run_command(cmd(1000), log), 0) << log;
  EXPECT_FALSE(fs::exists(out / "t_train_000001.bin"));
  EXPECT_EQ(read_shard_file(out / "t_train_000000.bin").size(), want_train.size());
  // No temporary files are left behind.
  for (const auto& e : fs::directory_iterator(out)) EXPECT_EQ(e.path().extension(), ".bin") << e.path();

  // Errors name the file or the flag and exit non-zero.
  EXPECT_EQ(run_command("'" + bin.string() + "' '" + (dir_ / "nope.txt").string() + "' --gpt2 '" +
                            gpt2.string() + "' --out '" + out.string() + "'", log), 1);
  EXPECT_NE(log.find((dir_ / "nope.txt").string() + ": no such file or folder"), std::string::npos) << log;
  EXPECT_NE(run_command("'" + bin.string() + "' --shard-size 0", log), 0);
  EXPECT_NE(log.find("--shard-size"), std::string::npos) << log;
  EXPECT_EQ(run_command("'" + bin.string() + "' --gpt2 '" + dir_.string() + "' --out '" + out.string() + "'", log), 1);
  EXPECT_NE(log.find("encoder.json"), std::string::npos) << log;
}
