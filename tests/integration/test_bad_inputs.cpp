// The bad-input catalog: build/bin/mnist fed truncated, garbage, empty and huge-dimension files,
// and every example and tool (mnist, gpt, resnet, char_lstm, transformer_encoder, demo_mlp,
// gpt-prepare, ember-info) fed absurd flags and paths. Every case must exit non-zero, by exit()
// and not by a signal, with a message naming the file or the flag; a flag case exits 2 (usage)
// or 1 (a path checked before any data is read), in one line. The file cases run under
// `ulimit -d` (kFileDataKb): a header that claims 2^31 images must be rejected before anything
// that large is allocated. docs/reliability.md ("Bad-input catalog") counts the cases.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>
#include <zlib.h>

#include "support/test_support.h"

#ifndef EMBER_BIN_DIR
#error "EMBER_BIN_DIR must name the folder holding the examples and tools"
#endif

namespace fs = std::filesystem;

// Under AddressSanitizer (the sanitizer run of scripts/test.sh builds mnist the same way as
// this test) `ulimit -d` cannot be used: ASan reserves terabytes of shadow address space at
// start. There ASAN_OPTIONS max_allocation_size_mb caps every allocation instead, and an
// over-size one is an ASan report, which the checks below fail on.
#if defined(__SANITIZE_ADDRESS__)
#define EMBER_TEST_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMBER_TEST_UNDER_ASAN 1
#endif
#endif

namespace {

// Data-segment cap for the file cases (KiB): a few hundred MB above what the program needs to
// start, far below what any corrupt header below claims. RLIMIT_DATA (`ulimit -d`) counts the
// heap and every private writable mapping, so a large malloc fails under it, but not the
// read-only text of shared libraries: `ulimit -v` (RLIMIT_AS) also counted the 540 MB
// libcublasLt of a CUDA build, which then failed to load on the CI machine ("failed to map
// segment from shared object") before main() ran.
constexpr long kFileDataKb = 800000;

struct ProcRun {
  bool signaled = false;
  int signal = 0;
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs `program args...` through /bin/sh (for the ulimit, when vm_kb > 0) with `exec`, so the
// status waitpid sees is the program's own: WIFSIGNALED tells a crash from an error exit.
ProcRun run_program(const std::string& program, const std::vector<std::string>& args,
                long vm_kb = 0) {
#ifdef EMBER_TEST_UNDER_ASAN
  const std::string limit = "export ASAN_OPTIONS=\"${ASAN_OPTIONS:+$ASAN_OPTIONS:}max_allocation_size_mb=" +
                            std::to_string(vm_kb / 1024) + ":allocator_may_return_null=0\"; ";
  const std::string script = (vm_kb > 0 ? limit : "") + "exec \"$0\" \"$@\"";
#else
  const std::string script =
      (vm_kb > 0 ? "ulimit -d " + std::to_string(vm_kb) + "; " : "") + "exec \"$0\" \"$@\"";
#endif
  std::vector<std::string> argv_s = {"/bin/sh", "-c", script, program};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : argv_s) argv.push_back(s.data());
  argv.push_back(nullptr);

  ProcRun r;
  int fds[2];
  if (pipe(fds) != 0) return r;
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[0]);
    close(fds[1]);
    execv("/bin/sh", argv.data());
    _exit(127);
  }
  close(fds[1]);
  char buf[4096];
  ssize_t got;
  while ((got = read(fds[0], buf, sizeof buf)) > 0) r.output.append(buf, size_t(got));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  r.signaled = WIFSIGNALED(status);
  if (r.signaled) r.signal = WTERMSIG(status);
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  return r;
}

std::string be32(uint32_t v) { return {char(v >> 24), char(v >> 16), char(v >> 8), char(v)}; }

std::string idx(uint32_t magic, const std::vector<uint32_t>& dims, size_t payload_bytes,
                uint8_t value = 1) {
  std::string s = be32(magic);
  for (uint32_t d : dims) s += be32(d);
  return s + std::string(payload_bytes, char(value));
}

void put(const fs::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), std::streamsize(bytes.size()));
}

void put_gz(const fs::path& p, const std::string& bytes) {
  gzFile g = gzopen(p.c_str(), "wb");
  ASSERT_NE(g, nullptr);
  gzwrite(g, bytes.data(), unsigned(bytes.size()));
  gzclose(g);
}

// The lines of a program's output (a final line without '\n' counts too).
size_t lines_of(const std::string& output) {
  size_t n = 0;
  for (char c : output) n += c == '\n';
  return n + (!output.empty() && output.back() != '\n');
}

// The clean-failure contract every case checks.
void expect_clean_failure(const ProcRun& r, const std::string& must_mention, const std::string& what) {
  SCOPED_TRACE(what + "\noutput:\n" + r.output);
  EXPECT_FALSE(r.signaled) << "killed by signal " << r.signal;
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.exit_code, 127) << "the program did not start";
  EXPECT_NE(r.output.find(must_mention), std::string::npos)
      << "the message does not name '" << must_mention << "'";
  EXPECT_EQ(r.output.find("error while loading shared libraries"), std::string::npos);
  EXPECT_EQ(r.output.find("Sanitizer"), std::string::npos) << "a sanitizer report";
  EXPECT_EQ(r.output.find("runtime error:"), std::string::npos) << "a UBSan report";
}

class BadInputs : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("ember_bad_inputs_" + std::to_string(getpid()));
    fs::remove_all(root_);
    fs::create_directories(data());
    // A valid small data set (12 train, 4 test images of 28x28); each case breaks one file.
    put(data() / "train-images-idx3-ubyte", idx(2051, {12, 28, 28}, 12 * 784));
    put(data() / "train-labels-idx1-ubyte", idx(2049, {12}, 12, 3));
    put(data() / "t10k-images-idx3-ubyte", idx(2051, {4, 28, 28}, 4 * 784));
    put(data() / "t10k-labels-idx1-ubyte", idx(2049, {4}, 4, 3));
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path data() const { return root_ / "data"; }

  ProcRun mnist(std::vector<std::string> args, long vm_kb = kFileDataKb) const {
    std::vector<std::string> all = {"--data", data().string(), "--out", (root_ / "out").string(),
                                    "--max-steps", "1", "--workers", "0"};
    all.insert(all.end(), args.begin(), args.end());
    return run_program(std::string(EMBER_BIN_DIR) + "/mnist", all, vm_kb);
  }
  // Replaces data()/name with `bytes` and runs mnist; the message must name the file.
  void file_case(const std::string& name, const std::string& bytes, const std::string& what) {
    put(data() / name, bytes);
    expect_clean_failure(mnist({}), name, what);
  }

  fs::path root_;
};

}  // namespace

// ---- files ----

TEST_F(BadInputs, ValidDataRuns) {
  // The baseline the other cases break: one step on the valid files succeeds.
  const ProcRun r = mnist({});
  EXPECT_FALSE(r.signaled);
  EXPECT_EQ(r.output.find("Sanitizer"), std::string::npos);
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST_F(BadInputs, EmptyImages) { file_case("train-images-idx3-ubyte", "", "empty file"); }
TEST_F(BadInputs, EmptyLabels) { file_case("train-labels-idx1-ubyte", "", "empty labels"); }

TEST_F(BadInputs, GarbageImages) {
  std::string junk(5000, '\0');
  for (size_t i = 0; i < junk.size(); ++i) junk[i] = char((i * 2654435761u) >> 13);
  file_case("train-images-idx3-ubyte", junk, "garbage bytes");
}

TEST_F(BadInputs, TextFileAsImages) {
  file_case("train-images-idx3-ubyte", "<html>404 Not Found</html>\n", "an HTML error page");
}

TEST_F(BadInputs, TruncatedHeader) {
  file_case("train-images-idx3-ubyte", idx(2051, {12, 28, 28}, 0).substr(0, 9), "cut header");
}

TEST_F(BadInputs, TruncatedPayload) {
  file_case("train-images-idx3-ubyte", idx(2051, {12, 28, 28}, 6 * 784), "half the pixels");
}

TEST_F(BadInputs, TrailingBytes) {
  file_case("train-images-idx3-ubyte", idx(2051, {12, 28, 28}, 12 * 784 + 7), "extra bytes");
}

TEST_F(BadInputs, HeaderClaims2Pow31Images) {
  file_case("train-images-idx3-ubyte", idx(2051, {1u << 31, 28, 28}, 784),
            "2^31 images in a 800-byte file");
}

TEST_F(BadInputs, HeaderClaimsHugeImages) {
  file_case("train-images-idx3-ubyte", idx(2051, {1, 65535, 65535}, 784), "one 4 GB image");
}

TEST_F(BadInputs, HeaderDimsOverflow64Bits) {
  file_case("train-images-idx3-ubyte", idx(2051, {0xffffffffu, 0xffffffffu, 0xffffffffu}, 0),
            "dims whose product overflows 64 bits");
}

TEST_F(BadInputs, LabelsClaim2Pow31) {
  file_case("train-labels-idx1-ubyte", idx(2049, {1u << 31}, 12, 3), "2^31 labels");
}

TEST_F(BadInputs, ZeroSizedImageDims) {
  file_case("train-images-idx3-ubyte", idx(2051, {12, 0, 28}, 0), "images of 0x28");
}

TEST_F(BadInputs, LabelsFileAsImages) {
  file_case("train-images-idx3-ubyte", idx(2049, {12}, 12, 3), "wrong magic");
}

TEST_F(BadInputs, WrongElementType) {
  // Type code 0x0D (f32) instead of 0x08 (u8).
  file_case("train-images-idx3-ubyte", be32(0x0D03) + be32(12) + be32(28) + be32(28), "f32 IDX");
}

TEST_F(BadInputs, LabelOutOfRange) {
  file_case("train-labels-idx1-ubyte", idx(2049, {12}, 12, 10), "label 10");
}

TEST_F(BadInputs, CountMismatch) {
  file_case("train-labels-idx1-ubyte", idx(2049, {11}, 11, 3), "11 labels for 12 images");
}

TEST_F(BadInputs, BrokenTestSplit) {
  file_case("t10k-images-idx3-ubyte", idx(2051, {4, 28, 28}, 100), "truncated test images");
}

TEST_F(BadInputs, ImagesNot28x28) {
  // Valid files of 4x4 images: refused before the model sees them, naming the file.
  put(data() / "train-images-idx3-ubyte", idx(2051, {12, 4, 4}, 12 * 16));
  put(data() / "t10k-images-idx3-ubyte", idx(2051, {4, 4, 4}, 4 * 16));
  expect_clean_failure(mnist({}), "train-images-idx3-ubyte", "4x4 images for a 784-input MLP");
}

// A data set of 0 images (even "0 images of 4294967295x4294967295") once loaded, trained 0 steps
// and printed "test accuracy -nan%" with exit 0; the loader now rejects an empty split.
TEST_F(BadInputs, EmptyDataSet) {
  put(data() / "train-images-idx3-ubyte", idx(2051, {0, 0xffffffffu, 0xffffffffu}, 0));
  put(data() / "train-labels-idx1-ubyte", idx(2049, {0}, 0));
  expect_clean_failure(mnist({}), "train-images-idx3-ubyte", "0 images");
}

TEST_F(BadInputs, GzipGarbage) {
  fs::remove(data() / "train-images-idx3-ubyte");
  put(data() / "train-images-idx3-ubyte.gz", std::string("\x1f\x8b\x08\x00garbage-garbage", 19));
  expect_clean_failure(mnist({}), "train-images-idx3-ubyte.gz", "corrupt gzip");
}

TEST_F(BadInputs, GzipTruncated) {
  fs::remove(data() / "train-images-idx3-ubyte");
  const fs::path gz = data() / "train-images-idx3-ubyte.gz";
  put_gz(gz, idx(2051, {12, 28, 28}, 12 * 784));
  fs::resize_file(gz, fs::file_size(gz) / 2);
  expect_clean_failure(mnist({}), "train-images-idx3-ubyte.gz", "half a gzip stream");
}

TEST_F(BadInputs, GzipHeaderClaims2Pow31Images) {
  fs::remove(data() / "train-images-idx3-ubyte");
  put_gz(data() / "train-images-idx3-ubyte.gz", idx(2051, {1u << 31, 28, 28}, 784));
  expect_clean_failure(mnist({}), "train-images-idx3-ubyte.gz", "2^31 images in a tiny .gz");
}

TEST_F(BadInputs, ImagesAreAFolder) {
  fs::remove(data() / "train-images-idx3-ubyte");
  fs::create_directories(data() / "train-images-idx3-ubyte");
  expect_clean_failure(mnist({}), "train-images-idx3-ubyte", "a folder where the file should be");
}

TEST_F(BadInputs, MissingFile) {
  fs::remove(data() / "train-labels-idx1-ubyte");
  expect_clean_failure(mnist({}), "train-labels-idx1-ubyte", "missing labels");
}

TEST_F(BadInputs, MissingDataFolder) {
  const ProcRun r = run_program(std::string(EMBER_BIN_DIR) + "/mnist",
                            {"--data", (root_ / "nowhere").string(), "--max-steps", "1"},
                            kFileDataKb);
  expect_clean_failure(r, "nowhere", "--data names no folder");
}

TEST_F(BadInputs, GarbageCheckpointOnResume) {
  const fs::path ck = root_ / "ckpt";
  fs::create_directories(ck / "step-00000001");
  put(ck / "latest", "step-00000001\n");
  for (const char* f : {"meta.safetensors", "model.safetensors", "optimizer.safetensors",
                        "scheduler.safetensors"})
    put(ck / "step-00000001" / f, std::string("\xff\xff\xff\xff\xff\xff\xff\x7f{}", 10));
  expect_clean_failure(mnist({"--checkpoint", ck.string(), "--resume"}), "step-00000001",
                       "a checkpoint of garbage files");
}

// ---- output paths: checked before any training, refused with exit code 1 and the flag named
// (a std::filesystem error once escaped main: SIGABRT, after the training had run) ----

TEST_F(BadInputs, OutputPathsThatCannotBeWritten) {
  const fs::path file = root_ / "a-file";
  put(file, "not a folder");
  const std::string mnist_bin = std::string(EMBER_BIN_DIR) + "/mnist";
  const std::string gpt_bin = std::string(EMBER_BIN_DIR) + "/gpt";
  const auto bin = [](const char* name) { return std::string(EMBER_BIN_DIR) + "/" + name; };
  const std::vector<std::string> base = {"--data", data().string(), "--max-steps", "1", "--workers", "0"};
  struct Case {
    std::string program;
    std::vector<std::string> args;
    std::string must_mention;
  };
  std::vector<Case> cases = {
      {mnist_bin, {"--out", file.string()}, "--out " + file.string() + ": exists and is not a folder"},
      {mnist_bin, {"--out", "/proc/ember-no-such-folder"}, "--out /proc/ember-no-such-folder: cannot create"},
      {mnist_bin, {"--out", (root_ / "out").string(), "--checkpoint", file.string()}, "--checkpoint " + file.string()},
      // gpt checks its paths before it reads any data or builds the model.
      {gpt_bin, {"--out", file.string()}, "--out " + file.string()},
      {gpt_bin, {"--out", (root_ / "gout").string(), "--checkpoint", (file / "sub").string()}, "--checkpoint"},
      {gpt_bin, {"--out", (root_ / "gout").string(), "--save-pretrained", file.string()}, "--save-pretrained"},
      // --export-onnx FILE: its folder made and probed, a folder in the file's place refused,
      // before the data is read (resnet's --data here is the valid set) or the model trained.
      {mnist_bin, {"--out", (root_ / "out").string(), "--export-onnx", root_.string()},
       "--export-onnx " + root_.string() + ": is a folder, not a file"},
      {gpt_bin, {"--export-onnx", root_.string(), "--checkpoint", (root_ / "ck").string()},
       "--export-onnx " + root_.string() + ": is a folder, not a file"},
      {bin("resnet"), {"--data", data().string(), "--export-onnx", "/proc/ember-no-such-folder/r.onnx"},
       "--export-onnx /proc/ember-no-such-folder: cannot create"},
      {bin("char_lstm"), {"--data", (root_ / "no-data-here").string(), "--export-onnx", (file / "x.onnx").string()},
       "--export-onnx " + file.string() + ": exists and is not a folder"},
      {bin("transformer_encoder"), {"--export-onnx", root_.string()},
       "--export-onnx " + root_.string() + ": is a folder, not a file"},
      // gpt-prepare checks --out before it reads the tokenizer or a document.
      {bin("gpt-prepare"), {"--out", file.string()}, "--out " + file.string() + ": exists and is not a folder"},
      {bin("gpt-prepare"), {"--out", "/proc/ember-no-such-folder"}, "--out /proc/ember-no-such-folder: cannot create"},
  };
  for (Case& c : cases) {
    std::vector<std::string> args = c.args;
    if (c.program == mnist_bin) args.insert(args.end(), base.begin(), base.end());
    const ProcRun r = run_program(c.program, args);
    std::string what = c.program;
    for (const auto& a : args) what += " " + a;
    expect_clean_failure(r, c.must_mention, what);
    EXPECT_EQ(r.exit_code, 1) << what << "\n" << r.output;
    EXPECT_EQ(lines_of(r.output), 1u) << what << "\n" << r.output;
    // mnist's progress line ("epoch 1/1 [...]") would come first had it trained before refusing.
    EXPECT_EQ(r.output.find("epoch 1/"), std::string::npos) << "trained before refusing: " << r.output;
  }
}

// ---- flags ----

// CLI11 saturates 99999999999999999999 to INT64_MAX; a batch larger than the training set once
// ran 0 steps (the steps-per-epoch sum overflowed) and exited 0 with "test accuracy 0.00%".
TEST_F(BadInputs, BatchSizeBeyondInt64) {
  expect_clean_failure(mnist({"--batch-size", "99999999999999999999"}), "--batch-size",
                       "--batch-size 99999999999999999999");
}

struct FlagCase {
  const char* program;  // a program in EMBER_BIN_DIR: "mnist", "gpt", "gpt-prepare", ...
  std::vector<std::string> args;  // "@ROOT@" reads as the case's temporary folder
  const char* must_mention;
  int exit_code = 2;  // 2: refused while the flags are read (usage); 1: refused at a path
};

class BadFlags : public BadInputs, public ::testing::WithParamInterface<FlagCase> {
 protected:
  // Runs `program args...`. mnist gets the valid data set (BadInputs::mnist); the others get
  // flags that keep an accepted bad flag from reaching any real data or long run (a --data
  // that names no folder, one step), each only where the case does not set that flag.
  ProcRun run_case(const std::string& program, std::vector<std::string> args) const {
    for (std::string& a : args)
      if (a.rfind("@ROOT@", 0) == 0) a = root_.string() + a.substr(6);
    if (program == "mnist") return mnist(args);
    const std::string nowhere = (root_ / "no-data-here").string();
    std::vector<std::pair<std::string, std::string>> defaults;
    if (program == "gpt")
      defaults = {{"--data", nowhere}, {"--val-data", ""}, {"--tokenizer", nowhere},
                  {"--out", (root_ / "gpt-out").string()}, {"--steps", "1"}};
    else if (program == "resnet" || program == "char_lstm")
      defaults = {{"--data", nowhere}};
    else if (program == "vae")
      defaults = {{"--data", nowhere}, {"--out", (root_ / "vae-out").string()}};
    else if (program == "transformer_encoder")
      defaults = {{"--steps", "1"}, {"--eval-size", "1"}};
    else if (program == "demo_mlp")
      defaults = {{"--steps", "1"}};
    else if (program == "gpt-prepare")
      defaults = {{"--data", nowhere}, {"--gpt2", nowhere}, {"--out", (root_ / "tokens").string()}};
    std::vector<std::string> all;
    for (const auto& [flag, value] : defaults)
      if (std::find(args.begin(), args.end(), flag) == args.end()) {
        all.push_back(flag);
        all.push_back(value);
      }
    all.insert(all.end(), args.begin(), args.end());  // last: a case's flag may lack its value
    return run_program(std::string(EMBER_BIN_DIR) + "/" + program, all);
  }
};

TEST_P(BadFlags, RejectedWithTheFlagNamed) {
  const FlagCase& c = GetParam();
  const ProcRun r = run_case(c.program, c.args);
  std::string what = c.program;
  for (const auto& a : c.args) what += " " + a;
  std::string must_mention = c.must_mention;
  if (must_mention.rfind("@ROOT@", 0) == 0) must_mention = root_.string() + must_mention.substr(6);
  expect_clean_failure(r, must_mention, what);
  EXPECT_EQ(r.exit_code, c.exit_code) << what << "\n" << r.output;
  // One line, before any data is read or step taken (a training run prints more), and in words:
  // not CLI11's second line nor its bounds printed to 309 digits.
  EXPECT_EQ(lines_of(r.output), 1u) << what << "\n" << r.output;
  EXPECT_EQ(r.output.find("Run with --help"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("not in range"), std::string::npos) << r.output;
}

INSTANTIATE_TEST_SUITE_P(
    Catalog, BadFlags,
    ::testing::Values(
        FlagCase{"mnist", {"--batch-size", "0"}, "--batch-size"},
        FlagCase{"mnist", {"--batch-size", "-3"}, "--batch-size"},
        FlagCase{"mnist", {"--batch-size", "abc"}, "--batch-size"},
        FlagCase{"mnist", {"--epochs", "-1"}, "--epochs"},
        // What the flag needs, not CLI11's "Value 0 not in range 0.000000 to 179769313486..."
        FlagCase{"mnist", {"--epochs", "0"}, "--epochs: must be at least 1, not 0"},
        // Once saturated to INT64_MAX by CLI11: epochs x steps per epoch overflowed.
        FlagCase{"mnist", {"--epochs", "99999999999999999999"}, "--epochs: must be at most 1048576"},
        FlagCase{"mnist", {"--epochs", "1.5"}, "--epochs: must be a whole number"},
        FlagCase{"mnist", {"--lr", "-1"}, "--lr"},
        FlagCase{"mnist", {"--lr", "inf"}, "--lr"},
        // NaN passes CLI11's own PositiveNumber check (NaN <= 0 is false); ember's refuses it.
        FlagCase{"mnist", {"--lr", "nan"}, "--lr: must be a finite positive number, not nan"},
        FlagCase{"mnist", {"--lr", "banana"}, "--lr"},
        FlagCase{"mnist", {"--weight-decay", "-0.1"},
                 "--weight-decay: must be zero or a finite positive number, not -0.1"},
        FlagCase{"mnist", {"--weight-decay", "inf"}, "--weight-decay"},
        // CLI11 read -1 as 2^64-1 and saturated 99999999999999999999999.
        FlagCase{"mnist", {"--seed", "-1"}, "--seed: must be a whole number from 0 to 18446744073709551615, not -1"},
        FlagCase{"mnist", {"--seed", "99999999999999999999999"}, "--seed"},
        FlagCase{"mnist", {"--workers", "100000"}, "--workers"},
        FlagCase{"mnist", {"--workers", "-1"}, "--workers"},
        FlagCase{"mnist", {"--log-every", "0"}, "--log-every"},
        FlagCase{"mnist", {"--max-steps", "-5"}, "--max-steps"},
        FlagCase{"mnist", {"--model", "resnet"}, "--model"},
        FlagCase{"mnist", {"--dataset", "cifar"}, "--dataset"},
        FlagCase{"mnist", {"--device", "tpu"}, "--device"},
        FlagCase{"mnist", {"--amp", "fp8"}, "--amp"},
        FlagCase{"mnist", {"--no-such-flag"}, "--no-such-flag"},
        FlagCase{"mnist", {"--batch-size"}, "--batch-size needs a value"},
        FlagCase{"ember-info", {"--estimate", "banana"}, "banana"},
        FlagCase{"ember-info", {"--estimate", "-5"}, "--estimate"},
        FlagCase{"ember-info", {"--estimate"}, "--estimate"},
        FlagCase{"ember-info", {"--estimate", "124M", "--dtype", "f8"}, "--dtype"},
        FlagCase{"ember-info", {"--estimate", "124M", "--optimizer", "lion"}, "--optimizer"},
        FlagCase{"ember-info", {"--estimate", "124M", "--layers", "many"}, "--layers"},
        // Examples of the flag's own kind of number, not parameter counts.
        FlagCase{"ember-info", {"--estimate", "124M", "--layers", "-1"}, "is not a layer count: a positive number (examples: 12, 48)"},
        FlagCase{"ember-info", {"--layers", "12"}, "--layers requires --estimate"},
        FlagCase{"ember-info", {"--no-such-flag"}, "--no-such-flag"},
        // ---- gpt ----
        FlagCase{"gpt", {"--batch-size", "0"}, "--batch-size: must be at least 1, not 0"},
        FlagCase{"gpt", {"--batch-size", "99999999999999999999"}, "--batch-size: must be at most 1048576"},
        FlagCase{"gpt", {"--seq-len", "-1"}, "--seq-len"},
        FlagCase{"gpt", {"--steps", "0"}, "--steps: must be at least 1, not 0"},
        FlagCase{"gpt", {"--steps", "abc"}, "--steps: must be a whole number from 1 to 1099511627776, not abc"},
        FlagCase{"gpt", {"--steps", "1.5"}, "--steps"},
        FlagCase{"gpt", {"--total-batch-tokens", "0"}, "--total-batch-tokens"},
        FlagCase{"gpt", {"--lr", "nan"}, "--lr: must be a finite positive number, not nan"},
        FlagCase{"gpt", {"--lr", "inf"}, "--lr"},
        FlagCase{"gpt", {"--min-lr", "-1"}, "--min-lr"},
        FlagCase{"gpt", {"--warmup-steps", "-1"}, "--warmup-steps"},
        FlagCase{"gpt", {"--weight-decay", "inf"}, "--weight-decay"},
        FlagCase{"gpt", {"--grad-clip", "0"}, "--grad-clip"},
        FlagCase{"gpt", {"--eval-every", "-1"}, "--eval-every"},
        FlagCase{"gpt", {"--eval-steps", "0"}, "--eval-steps"},
        FlagCase{"gpt", {"--sample-every", "x"}, "--sample-every"},
        FlagCase{"gpt", {"--checkpoint-every", "-3"}, "--checkpoint-every"},
        FlagCase{"gpt", {"--log-every", "0"}, "--log-every"},
        FlagCase{"gpt", {"--profile", "-1"}, "--profile"},
        FlagCase{"gpt", {"--tp", "0"}, "--tp: must be at least 1, not 0"},
        FlagCase{"gpt", {"--seed", "-1"}, "--seed"},
        // CLI11's Range(0, 1) let NaN through (NaN < 0 and NaN > 1 are both false).
        FlagCase{"gpt", {"--top-p", "nan"}, "--top-p: must be a number from 0 to 1, not nan"},
        FlagCase{"gpt", {"--top-p", "1.5"}, "--top-p"},
        FlagCase{"gpt", {"--top-k", "-1"}, "--top-k"},
        FlagCase{"gpt", {"--temperature", "-0.5"}, "--temperature"},
        FlagCase{"gpt", {"--max-new-tokens", "0"}, "--max-new-tokens"},
        FlagCase{"gpt", {"--arch", "rnn"}, "--arch"},
        FlagCase{"gpt", {"--preset", "huge"}, "--preset"},
        FlagCase{"gpt", {"--device", "tpu"}, "--device"},
        FlagCase{"gpt", {"--amp", "fp8"}, "--amp"},
        FlagCase{"gpt", {"--no-such-flag"}, "--no-such-flag"},
        FlagCase{"gpt", {"--lr"}, "--lr needs a value"},
        FlagCase{"gpt", {"--resume"}, "--resume needs --checkpoint"},
        FlagCase{"gpt", {"--cuda-graph"}, "--cuda-graph needs --device cuda"},
        FlagCase{"gpt", {"--fsdp", "--ddp"}, "--fsdp"},
        FlagCase{"gpt", {"--data", "@ROOT@/nowhere"}, "@ROOT@/nowhere: no such file or folder", 1},
        FlagCase{"gpt", {"--init-from", "@ROOT@/nowhere"}, "@ROOT@/nowhere/config.json", 1},
        FlagCase{"gpt", {"--generate"}, "--generate needs --checkpoint DIR or --init-from DIR", 1},
        FlagCase{"gpt", {"--generate", "--init-from", "@ROOT@/nowhere"}, "--tokenizer", 1},
        // ---- resnet ----
        FlagCase{"vae", {"--epochs", "0"}, "--epochs: must be at least 1, not 0"},
        FlagCase{"vae", {"--epochs", "99999999999999999999"}, "--epochs: must be at most 1048576"},
        FlagCase{"vae", {"--batch-size", "abc"}, "--batch-size"},
        FlagCase{"vae", {"--lr", "nan"}, "--lr"},
        FlagCase{"vae", {"--latent", "0"}, "--latent: must be at least 1, not 0"},
        FlagCase{"vae", {"--max-steps", "-1"}, "--max-steps"},
        FlagCase{"vae", {"--seed", "-1"}, "--seed"},
        FlagCase{"vae", {"--device", "tpu"}, "--device"},
        FlagCase{"vae", {"--workers", "65"}, "--workers: must be at most 64"},
        FlagCase{"vae", {"--no-such-flag"}, "--no-such-flag"},
        FlagCase{"vae", {"--lr"}, "--lr needs a value"},
        FlagCase{"vae", {"--data", "@ROOT@/nowhere"}, "@ROOT@/nowhere", 1},
        FlagCase{"resnet", {"--epochs", "0"}, "--epochs: must be at least 1, not 0"},
        FlagCase{"resnet", {"--epochs", "5000"}, "--epochs: must be at most 1000, not 5000"},
        FlagCase{"resnet", {"--batch-size", "-1"}, "--batch-size"},
        FlagCase{"resnet", {"--batch-size", "abc"}, "--batch-size"},
        FlagCase{"resnet", {"--limit", "-1"}, "--limit"},
        // CLI11's Range(1e-8, 10) printed its bound as 0.000000 and let NaN through.
        FlagCase{"resnet", {"--lr", "0"}, "--lr: must be a number from 1e-08 to 10, not 0"},
        FlagCase{"resnet", {"--lr", "nan"}, "--lr"},
        FlagCase{"resnet", {"--weight-decay", "2"}, "--weight-decay"},
        FlagCase{"resnet", {"--workers", "65"}, "--workers: must be at most 64"},
        FlagCase{"resnet", {"--seed", "x"}, "--seed"},
        FlagCase{"resnet", {"--device", "tpu"}, "--device"},
        FlagCase{"resnet", {"--amp", "fp8"}, "--amp"},
        FlagCase{"resnet", {"--no-such-flag"}, "--no-such-flag"},
        FlagCase{"resnet", {"--epochs"}, "--epochs needs a value"},
        FlagCase{"resnet", {"--data", "@ROOT@/nowhere"}, "@ROOT@/nowhere/train-images-idx3-ubyte", 1},
        // ---- char_lstm ----
        FlagCase{"char_lstm", {"--steps", "0"}, "--steps: must be at least 1, not 0"},
        FlagCase{"char_lstm", {"--hidden", "99999999999999999999"}, "--hidden: must be at most 65536"},
        FlagCase{"char_lstm", {"--layers", "0"}, "--layers"},
        FlagCase{"char_lstm", {"--batch", "-2"}, "--batch"},
        FlagCase{"char_lstm", {"--seq-len", "abc"}, "--seq-len"},
        FlagCase{"char_lstm", {"--lr", "inf"}, "--lr"},
        FlagCase{"char_lstm", {"--clip", "nan"}, "--clip"},
        FlagCase{"char_lstm", {"--eval-every", "0"}, "--eval-every"},
        FlagCase{"char_lstm", {"--eval-batches", "0"}, "--eval-batches"},
        FlagCase{"char_lstm", {"--sample", "-1"}, "--sample"},
        FlagCase{"char_lstm", {"--device", "tpu"}, "--device"},
        FlagCase{"char_lstm", {"--no-such-flag"}, "--no-such-flag"},
        FlagCase{"char_lstm", {"--hidden"}, "--hidden needs a value"},
        FlagCase{"char_lstm", {"--data", "@ROOT@/nowhere"}, "@ROOT@/nowhere: no Brown corpus files", 1},
        // ---- transformer_encoder ----
        FlagCase{"transformer_encoder", {"--steps", "-1"}, "--steps"},
        FlagCase{"transformer_encoder", {"--batch-size", "0"}, "--batch-size"},
        FlagCase{"transformer_encoder", {"--max-len", "5000"}, "--max-len: must be at most 4096"},
        FlagCase{"transformer_encoder", {"--d-model", "0"}, "--d-model"},
        FlagCase{"transformer_encoder", {"--heads", "3"}, "--heads 3 must divide --d-model 64"},
        FlagCase{"transformer_encoder", {"--layers", "abc"}, "--layers"},
        FlagCase{"transformer_encoder", {"--ff", "-1"}, "--ff"},
        FlagCase{"transformer_encoder", {"--dropout", "1"}, "--dropout: must be a number from 0 to 0.99, not 1"},
        FlagCase{"transformer_encoder", {"--dropout", "nan"}, "--dropout"},
        FlagCase{"transformer_encoder", {"--lr", "-1e-3"}, "--lr"},
        FlagCase{"transformer_encoder", {"--eval-size", "0"}, "--eval-size"},
        FlagCase{"transformer_encoder", {"--log-every", "0"}, "--log-every"},
        FlagCase{"transformer_encoder", {"--device", "tpu"}, "--device"},
        FlagCase{"transformer_encoder", {"--no-such-flag"}, "--no-such-flag"},
        FlagCase{"transformer_encoder", {"--steps"}, "--steps needs a value"},
        // ---- demo_mlp ----
        FlagCase{"demo_mlp", {"--steps", "0"}, "--steps"},
        FlagCase{"demo_mlp", {"--batch-size", "0"}, "--batch-size"},
        // Once 0 batches per pass and a division by zero: SIGFPE.
        FlagCase{"demo_mlp", {"--batch-size", "100000", "--samples", "10"},
                 "--batch-size 100000 must be at most --samples 10"},
        // --lr had no check at all.
        FlagCase{"demo_mlp", {"--lr", "nan"}, "--lr: must be a finite positive number, not nan"},
        FlagCase{"demo_mlp", {"--lr", "-1"}, "--lr"},
        FlagCase{"demo_mlp", {"--hidden", "99999999999999999999"}, "--hidden"},
        FlagCase{"demo_mlp", {"--samples", "0"}, "--samples"},
        FlagCase{"demo_mlp", {"--log-every", "-1"}, "--log-every"},
        FlagCase{"demo_mlp", {"--seed", "-5"}, "--seed"},
        FlagCase{"demo_mlp", {"--device", "tpu"}, "--device"},
        FlagCase{"demo_mlp", {"--no-such-flag"}, "--no-such-flag"},
        FlagCase{"demo_mlp", {"--lr"}, "--lr needs a value"},
        // ---- gpt-prepare ----
        FlagCase{"gpt-prepare", {"--shard-size", "0"}, "--shard-size: must be at least 1, not 0"},
        FlagCase{"gpt-prepare", {"--shard-size", "99999999999999999999"}, "--shard-size"},
        FlagCase{"gpt-prepare", {"--val-fraction", "nan"}, "--val-fraction: must be a number from 0 to 1, not nan"},
        FlagCase{"gpt-prepare", {"--val-fraction", "1.5"}, "--val-fraction"},
        FlagCase{"gpt-prepare", {"--seed", "-1"}, "--seed"},
        FlagCase{"gpt-prepare", {"--corpus", "pdf"}, "--corpus"},
        FlagCase{"gpt-prepare", {"--no-such-flag"}, "--no-such-flag"},
        FlagCase{"gpt-prepare", {"--out"}, "--out needs a value"},
        FlagCase{"gpt-prepare", {"--gpt2", "@ROOT@/nowhere"}, "@ROOT@/nowhere/encoder.json", 1},
        FlagCase{"gpt-prepare", {"--name", "a/b"}, "--name a/b must not contain '/'", 1},
        FlagCase{"gpt-prepare", {"--corpus", "text"}, "--corpus text needs input files", 1}));
