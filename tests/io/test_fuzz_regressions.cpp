// Replays every input kept under tests/fixtures/fuzz/<target>/ (crashes the fuzzers found,
// minimized, plus hand-written edge cases) through the same harness the libFuzzer targets run
// (tests/fuzz/harness.h), in the normal CI build: each must load or fail with ember::IOError,
// never crash, trip a sanitizer (the sanitizer CI job), or throw anything else.
// docs/reliability.md ("Fuzzing") lists the inputs and the fixes they pin.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "fuzz/harness.h"
#include "support/test_support.h"

namespace fs = std::filesystem;

namespace {

std::vector<fs::path> kept_inputs(const std::string& target) {
  const fs::path dir = fs::path(EMBER_TEST_DATA_DIR) / "fuzz" / target;
  std::vector<fs::path> files;
  if (fs::is_directory(dir))
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_regular_file()) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

void replay(const std::string& target, void (*run)(const uint8_t*, size_t)) {
  const auto files = kept_inputs(target);
  ASSERT_FALSE(files.empty()) << "no inputs in tests/fixtures/fuzz/" << target;
  for (const auto& f : files) {
    SCOPED_TRACE(f.string());
    const std::string bytes = slurp(f);
    EXPECT_NO_THROW(run(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
  }
  fs::remove_all(ember_fuzz::scratch_dir());  // the harness's per-process scratch folder
}

}  // namespace

TEST(FuzzRegressions, Idx) { replay("fuzz_idx", ember_fuzz::run_idx); }
TEST(FuzzRegressions, Safetensors) { replay("fuzz_safetensors", ember_fuzz::run_safetensors); }
TEST(FuzzRegressions, Checkpoint) { replay("fuzz_checkpoint", ember_fuzz::run_checkpoint); }
