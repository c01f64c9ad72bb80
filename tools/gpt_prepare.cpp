// gpt-prepare: text -> GPT-2 token shards in llm.c's .bin format, for data::TokenShards and
// the GPT example.
//
//   bash scripts/fetch_data.sh gpt2 brown
//   build/bin/gpt-prepare                          # data/brown -> data/brown_tokens/
//   build/bin/gpt-prepare notes.txt books/ --out data/mine --name mine --shard-size 1000000
//
// Each document (a Brown file, or one input file) becomes <|endoftext|> followed by its tokens,
// as llm.c's data scripts write them. Documents are shuffled with --seed (unless --no-shuffle),
// then the first --val-fraction of them (at least one when the fraction is positive) go to
// <name>_val_NNNNNN.bin and the rest to <name>_train_NNNNNN.bin, each shard holding
// --shard-size tokens (the last of a split between half and 1.5 times that, so that no shard
// is too short for a training window). A shard is written atomically (temporary file, fsync, rename, folder
// fsync), and shards of an earlier run under the same <name> are removed first, so the folder
// never mixes two runs. Exit status: 0 on success, 1 on an error (the message names the file or
// flag), 2 for a bad flag; either is one line, and --out is checked before anything is read.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <ember/data.h>
#include <ember/error.h>

#include "../examples/common/cli_checks.h"  // flag checks and messages shared with the examples
#include "file_util.h"                      // io/src: write_file_atomic

namespace fs = std::filesystem;
using namespace ember;

namespace {

struct Config {
  std::vector<std::string> inputs;
  std::string corpus = "brown";
  std::string data = "data/brown";
  std::string gpt2 = "data/gpt2";
  std::string out = "data/brown_tokens";
  std::string name;
  int64_t shard_size = 100'000'000;
  double val_fraction = 0.1;
  uint64_t seed = 0;
  bool no_shuffle = false;
  bool quiet = false;
};

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw IOError(str("[gpt-prepare] ", path, ": cannot open: ", std::strerror(errno)));
  std::ostringstream s;
  s << f.rdbuf();
  if (f.bad()) throw IOError(str("[gpt-prepare] ", path, ": read error"));
  return s.str();
}

// Regular files named by `inputs` (folders: every regular file below them, sorted).
std::vector<std::string> list_text_files(const std::vector<std::string>& inputs) {
  std::vector<std::string> files;
  for (const std::string& in : inputs) {
    std::error_code ec;
    if (fs::is_regular_file(in, ec)) {
      files.push_back(in);
    } else if (fs::is_directory(in, ec)) {
      std::vector<std::string> found;
      for (const auto& e : fs::recursive_directory_iterator(in, ec))
        if (e.is_regular_file(ec)) found.push_back(e.path().string());
      if (ec) throw IOError(str("[gpt-prepare] ", in, ": cannot list: ", ec.message()));
      if (found.empty()) throw IOError(str("[gpt-prepare] ", in, ": folder holds no files"));
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else {
      throw IOError(str("[gpt-prepare] ", in, ": no such file or folder"));
    }
  }
  return files;
}

std::string human_duration(double s) {
  char buf[32];
  if (s < 60) std::snprintf(buf, sizeof buf, "%.1fs", s);
  else std::snprintf(buf, sizeof buf, "%dm%02ds", int(s) / 60, int(s) % 60);
  return buf;
}

// Documents done / total, tokens, throughput; redrawn in place on a terminal, one line per
// tenth otherwise (as examples/common/train_log.h's ProgressBar).
class Progress {
 public:
  Progress(int64_t total, bool quiet)
      : total_(total), quiet_(quiet), tty_(isatty(fileno(stdout)) != 0), t0_(clock::now()) {}
  void update(int64_t done, int64_t tokens, int64_t bytes) {
    if (quiet_) return;
    const int decile = total_ > 0 ? int(10 * done / total_) : 10;
    if (!tty_ && decile == last_decile_ && done != total_) return;
    last_decile_ = decile;
    const double s = seconds();
    const int width = 24, filled = total_ > 0 ? int(width * done / total_) : width;
    std::string bar(size_t(filled), '#');
    bar.resize(size_t(width), '.');
    const double eta = done > 0 ? s / double(done) * double(total_ - done) : 0;
    std::printf("%stokenize [%s] %lld/%lld docs %lld tokens %.1f MB/s %s %s%s", tty_ ? "\r" : "",
                bar.c_str(), (long long)done, (long long)total_, (long long)tokens,
                s > 0 ? double(bytes) / 1e6 / s : 0.0, done == total_ ? "in" : "ETA",
                human_duration(done == total_ ? s : eta).c_str(), tty_ ? "\033[K" : "\n");
    std::fflush(stdout);
  }
  void finish() {
    if (!quiet_ && tty_) std::printf("\n");
    std::fflush(stdout);
  }
  double seconds() const { return std::chrono::duration<double>(clock::now() - t0_).count(); }

 private:
  using clock = std::chrono::steady_clock;
  int64_t total_;
  bool quiet_, tty_;
  int last_decile_ = -1;
  clock::time_point t0_;
};

// Collects one split's tokens and writes shards of --shard-size tokens. The last shard of a
// split absorbs a remainder below half a shard (so no shard is too short to hold a training
// window: every shard has at least min(shard_size / 2, split size) tokens, at most 1.5x
// shard_size); one full shard waits in memory until the next one fills, for that.
class ShardWriter {
 public:
  ShardWriter(std::string out, std::string prefix, int64_t shard_size)
      : out_(std::move(out)), prefix_(std::move(prefix)), shard_size_(shard_size) {}
  void add(const std::vector<int32_t>& tokens) {
    for (const int32_t t : tokens) {
      if (t < 0 || t > 65535)
        throw ValueError(str("[gpt-prepare] token ", t, " does not fit the shards' uint16"));
      buffer_.push_back(uint16_t(t));
      if (int64_t(buffer_.size()) == shard_size_) {
        if (!pending_.empty()) write(pending_);
        pending_.swap(buffer_);
        buffer_.clear();
      }
    }
    count_ += int64_t(tokens.size());
  }
  void finish() {
    if (!pending_.empty() && int64_t(buffer_.size()) < shard_size_ / 2) {
      pending_.insert(pending_.end(), buffer_.begin(), buffer_.end());
      buffer_.clear();
    }
    if (!pending_.empty()) write(pending_);
    if (!buffer_.empty()) write(buffer_);
    pending_.clear();
    buffer_.clear();
  }
  const std::vector<std::pair<std::string, int64_t>>& written() const { return written_; }
  int64_t total() const { return count_; }

 private:
  void write(const std::vector<uint16_t>& tokens) {
    char name[64];
    std::snprintf(name, sizeof name, "_%06d.bin", int(written_.size()));
    const std::string path = out_ + "/" + prefix_ + name;
    std::vector<int32_t> header(size_t(data::kTokenShardHeaderInts), 0);
    header[0] = data::kTokenShardMagic;
    header[1] = data::kTokenShardVersion;
    header[2] = int32_t(tokens.size());
    io::detail::write_file_atomic(path, "[gpt-prepare]", [&](io::detail::File& f) {
      f.write_all(header.data(), header.size() * sizeof(int32_t));
      f.write_all(tokens.data(), tokens.size() * sizeof(uint16_t));
    });
    written_.emplace_back(path, int64_t(tokens.size()));
  }
  std::string out_, prefix_;
  int64_t shard_size_;
  std::vector<uint16_t> buffer_, pending_;
  std::vector<std::pair<std::string, int64_t>> written_;
  int64_t count_ = 0;
};

int run(Config cfg) {
  const bool text_mode = cfg.corpus == "text";
  if (text_mode && cfg.inputs.empty())
    throw ValueError("[gpt-prepare] --corpus text needs input files or folders");
  if (!text_mode && !cfg.inputs.empty())
    throw ValueError("[gpt-prepare] input files are read with --corpus text (the default corpus, brown, reads --data)");
  if (cfg.name.empty()) cfg.name = text_mode ? "text" : "brown";
  if (cfg.name.find('/') != std::string::npos)
    throw ValueError(str("[gpt-prepare] --name ", cfg.name, " must not contain '/'"));
  // Where the shards go, checked before the tokenizer and the documents are read.
  examples::prepare_output_folder("gpt-prepare", "--out", cfg.out);

  const data::GPT2Tokenizer tok = data::GPT2Tokenizer::from_dir(cfg.gpt2);
  const std::vector<std::string> docs = text_mode ? list_text_files(cfg.inputs) : data::brown_files(cfg.data);

  // Shuffle the documents, then the first val_fraction of them are the validation split.
  std::vector<size_t> order(docs.size());
  std::iota(order.begin(), order.end(), size_t(0));
  if (!cfg.no_shuffle) {
    std::mt19937_64 rng(cfg.seed);
    std::shuffle(order.begin(), order.end(), rng);
  }
  size_t n_val = size_t(std::llround(cfg.val_fraction * double(docs.size())));
  if (cfg.val_fraction > 0 && n_val == 0) n_val = 1;
  if (n_val >= docs.size() && cfg.val_fraction > 0) {
    if (docs.size() < 2)
      throw ValueError(str("[gpt-prepare] --val-fraction ", cfg.val_fraction, " needs at least 2 documents, got ",
                           docs.size(), " (use --val-fraction 0)"));
    n_val = docs.size() - 1;
  }

  // Shards of an earlier run under this name go first, so the folder never mixes two runs.
  for (const auto& e : fs::directory_iterator(cfg.out)) {
    const std::string f = e.path().filename().string();
    if ((f.rfind(cfg.name + "_train_", 0) == 0 || f.rfind(cfg.name + "_val_", 0) == 0) &&
        e.path().extension() == ".bin")
      fs::remove(e.path());
  }

  ShardWriter val(cfg.out, cfg.name + "_val", cfg.shard_size), train(cfg.out, cfg.name + "_train", cfg.shard_size);
  Progress progress(int64_t(docs.size()), cfg.quiet);
  int64_t bytes = 0;
  std::vector<int32_t> tokens;
  for (size_t i = 0; i < order.size(); ++i) {
    const std::string& path = docs[order[i]];
    const std::string raw = read_file(path);
    const std::string text = text_mode ? raw : data::brown_untag(raw);
    tokens.clear();
    tokens.push_back(tok.eot_token());  // every document begins with <|endoftext|> (llm.c)
    tok.encode_into(text, tokens);
    (i < n_val ? val : train).add(tokens);
    bytes += int64_t(text.size());
    progress.update(int64_t(i + 1), val.total() + train.total(), bytes);
  }
  val.finish();
  train.finish();
  progress.finish();

  for (const ShardWriter* w : {&val, &train})
    for (const auto& [path, n] : w->written()) std::printf("wrote %s (%lld tokens)\n", path.c_str(), (long long)n);
  const double s = progress.seconds();
  std::printf("%zu documents (%zu val, %zu train), %lld val + %lld train tokens, %.1f MB of text in %.1f s\n",
              docs.size(), n_val, docs.size() - n_val, (long long)val.total(), (long long)train.total(),
              double(bytes) / 1e6, s);
  std::printf("result: {\"documents\": %zu, \"val_tokens\": %lld, \"train_tokens\": %lld, \"val_shards\": %zu, "
              "\"train_shards\": %zu, \"mb_per_s\": %.2f}\n",
              docs.size(), (long long)val.total(), (long long)train.total(), val.written().size(),
              train.written().size(), s > 0 ? double(bytes) / 1e6 / s : 0.0);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  CLI::App app{"gpt-prepare: text -> GPT-2 token shards (llm.c .bin format) for data::TokenShards"};
  app.add_option("inputs", cfg.inputs, "text files or folders (with --corpus text)");
  app.add_option("--corpus", cfg.corpus, "brown (reads --data, strips the POS tags) or text (the inputs)")
      ->check(CLI::IsMember({"brown", "text"}));
  app.add_option("--data", cfg.data, "the Brown corpus folder (bash scripts/fetch_data.sh brown)");
  app.add_option("--gpt2", cfg.gpt2, "folder with encoder.json and vocab.bpe (bash scripts/fetch_data.sh gpt2)");
  app.add_option("--out", cfg.out, "output folder for <name>_{val,train}_NNNNNN.bin");
  app.add_option("--name", cfg.name, "shard file prefix (default: the corpus name)");
  app.add_option("--shard-size", cfg.shard_size,
                 "tokens per shard (the last of a split holds 0.5x to 1.5x as many)")
      ->check(examples::WholeNumberIn(1, int64_t(INT32_MAX) / 2));
  app.add_option("--val-fraction", cfg.val_fraction, "fraction of the documents for the validation split")
      ->check(examples::NumberIn(0.0, 1.0));
  app.add_option("--seed", cfg.seed, "seed of the document shuffle")->check(examples::Seed);
  app.add_flag("--no-shuffle", cfg.no_shuffle, "keep the documents in file order (val = the first ones)");
  app.add_flag("--quiet", cfg.quiet, "no progress bar");
  if (const std::optional<int> rc = examples::parse_flags("gpt-prepare", app, argc, argv)) return *rc;
  if (!cfg.inputs.empty() && app.count("--corpus") == 0) cfg.corpus = "text";  // inputs imply text
  return examples::exit_code_of("gpt-prepare", [&] { return run(cfg); });
}
