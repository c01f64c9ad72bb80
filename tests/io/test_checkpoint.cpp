// Training checkpoints: round trip, pruning, replacement, fallback when `latest` or a folder is
// broken, clear errors, and the crash test: a child process saving in a loop is SIGKILLed at
// random instants, and every time the newest checkpoint must load, complete and consistent,
// and never be older than the one before the child started.
#include <ember/io.h>

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <barrier>
#include <thread>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include "support/test_support.h"

namespace ember {
namespace {

namespace fs = std::filesystem;

#define EXPECT_MATCH(value, matcher) EXPECT_TRUE((matcher)(value))
auto has_substr(std::string sub) {
  return [sub](const std::string& s) -> ::testing::AssertionResult {
    if (s.find(sub) != std::string::npos) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "\"" << sub << "\" is not in \"" << s << "\"";
  };
}

struct TempDir {
  std::string path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "ember-ckpt-XXXXXX").string();
    EXPECT_NE(::mkdtemp(tmpl.data()), nullptr);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::permissions(path, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return path + "/" + name; }
};

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}
void write_all(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), std::streamsize(bytes.size()));
}

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// Built with raw stores only (no ops): the crash test's forked child must not enter OpenMP.
Tensor filled(const Shape& shape, float value) {
  Tensor t = detail::make_tensor(shape, DType::f32, Device::cpu());
  std::fill_n(t.data_ptr<float>(), t.numel(), value);
  return t;
}
Tensor iota(int64_t n, int64_t start) {
  Tensor t = detail::make_tensor({n}, DType::i64, Device::cpu());
  for (int64_t i = 0; i < n; ++i) t.data_ptr<int64_t>()[i] = start + i;
  return t;
}

// Every part of the checkpoint of step s is a function of s, so a mix of two saves shows.
io::Checkpoint checkpoint_at(int64_t s, int64_t big = 256) {
  io::Checkpoint c;
  c.step = s;
  c.model.insert("fc.weight", filled({big, 1024}, float(s)));
  c.model.insert("fc.bias", iota(10, s));
  c.optimizer.insert("state.0.exp_avg", filled({big, 1024}, float(2 * s)));
  c.optimizer.set_int("state.0.step", s);
  c.optimizer.set_scalar("param_groups.0.lr", 0.5 / double(s + 1));
  c.scheduler.set_int("last_epoch", s);
  c.rng = {uint64_t(1000 + s), uint64_t(7 * s) | (uint64_t(1) << 63)};  // top bit survives
  c.meta = {{"step", std::to_string(s)}, {"run", "test"}};
  return c;
}

::testing::AssertionResult consistent(const io::Checkpoint& c, int64_t big = 256) {
  int64_t s = c.step;
  auto fail = [&](const char* what) { return ::testing::AssertionFailure() << "step " << s << ": " << what; };
  if (c.model.keys() != std::vector<std::string>{"fc.weight", "fc.bias"}) return fail("model keys");
  const Tensor& w = c.model.at("fc.weight");
  if (w.sizes() != Shape({big, 1024}) || w.dtype() != DType::f32) return fail("weight shape");
  const float* pw = w.data_ptr<float>();
  if (!std::all_of(pw, pw + w.numel(), [&](float v) { return v == float(s); })) return fail("weight values");
  auto bias = c.model.at("fc.bias").to_vector<int64_t>();
  for (int64_t i = 0; i < 10; ++i)
    if (bias[size_t(i)] != s + i) return fail("bias values");
  const Tensor& m = c.optimizer.at("state.0.exp_avg");
  const float* pm = m.data_ptr<float>();
  if (!std::all_of(pm, pm + m.numel(), [&](float v) { return v == float(2 * s); })) return fail("exp_avg");
  if (c.optimizer.integer("state.0.step") != s) return fail("optimizer step");
  if (c.optimizer.scalar("param_groups.0.lr") != 0.5 / double(s + 1)) return fail("lr");
  if (c.scheduler.integer("last_epoch") != s) return fail("scheduler");
  if (c.rng.seed != uint64_t(1000 + s) || c.rng.offset != (uint64_t(7 * s) | (uint64_t(1) << 63)))
    return fail("rng");
  if (c.meta != std::map<std::string, std::string>{{"step", std::to_string(s)}, {"run", "test"}})
    return fail("meta");
  return ::testing::AssertionSuccess();
}

TEST(Checkpoint, SaveAndLoad) {
  TempDir tmp;
  std::string dir = tmp.file("run/ckpt");  // created, parents included
  io::Checkpoint c = checkpoint_at(123, 4);
  std::string where = io::save_checkpoint(dir, c);
  EXPECT_EQ(where, dir + "/step-00000123");
  EXPECT_EQ(names_in(dir), (std::vector<std::string>{"latest", "step-00000123"}));
  EXPECT_EQ(read_all(dir + "/latest"), "step-00000123\n");
  EXPECT_EQ(names_in(where), (std::vector<std::string>{"meta.safetensors", "model.safetensors",
                                                      "optimizer.safetensors", "scheduler.safetensors"}));
  // Each part is an ordinary safetensors file; the free-form meta is its metadata.
  EXPECT_EQ(io::load_safetensors(where + "/model.safetensors").keys(), c.model.keys());
  EXPECT_EQ(io::load_safetensors_metadata(where + "/meta.safetensors"), (io::Metadata{c.meta.begin(), c.meta.end()}));

  EXPECT_TRUE(consistent(io::load_checkpoint(where), 4));
  std::vector<std::string> notes;
  auto latest = io::load_latest_checkpoint(dir, Device::cpu(), &notes);
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->step, 123);
  EXPECT_TRUE(consistent(*latest, 4));
  EXPECT_TRUE(notes.empty());

  // The RNG state round-trips into the generator as the user would restore it.
  Generator g;
  g.set_state(latest->rng);
  EXPECT_EQ(g.get_state().seed, 1123u);
}

TEST(Checkpoint, LoadsOntoDevice) {
  for (Device dev : test::test_devices()) {
    if (test::missing_device(dev)) continue;  // the CPU half still counts
    TempDir tmp;
    io::save_checkpoint(tmp.path, checkpoint_at(3, 2));
    io::Checkpoint c = io::load_checkpoint(tmp.path + "/step-00000003", dev);
    EXPECT_EQ(c.model.at("fc.weight").device(), dev);
    EXPECT_EQ(c.optimizer.at("state.0.exp_avg").device(), dev);
    EXPECT_EQ(c.model.at("fc.weight").to_vector<double>()[5], 3.0);
  }
}

TEST(Checkpoint, KeepLastPrunesOldest) {
  TempDir tmp;
  for (int64_t s = 1; s <= 5; ++s) io::save_checkpoint(tmp.path, checkpoint_at(s, 1), 2);
  EXPECT_EQ(names_in(tmp.path), (std::vector<std::string>{"latest", "step-00000004", "step-00000005"}));
  auto steps = io::list_checkpoints(tmp.path);
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[0].step, 4);
  EXPECT_EQ(steps[1].path, tmp.path + "/step-00000005");

  // keep_last <= 0 keeps everything.
  TempDir all;
  for (int64_t s = 1; s <= 4; ++s) io::save_checkpoint(all.path, checkpoint_at(s, 1), 0);
  EXPECT_EQ(io::list_checkpoints(all.path).size(), 4u);
}

TEST(Checkpoint, PruningSparesLaterStepsOfAnAbandonedRun) {
  TempDir tmp;
  io::save_checkpoint(tmp.path, checkpoint_at(10, 1), 0);
  io::save_checkpoint(tmp.path, checkpoint_at(20, 1), 0);
  // Resumed from an earlier point: step 15 becomes latest; 20 is someone's data and stays.
  io::save_checkpoint(tmp.path, checkpoint_at(15, 1), 1);
  EXPECT_EQ(names_in(tmp.path), (std::vector<std::string>{"latest", "step-00000015", "step-00000020"}));
  EXPECT_EQ(io::load_latest_checkpoint(tmp.path)->step, 15);
}

TEST(Checkpoint, SavingAnExistingStepReplacesIt) {
  TempDir tmp;
  io::Checkpoint a = checkpoint_at(7, 1);
  io::save_checkpoint(tmp.path, a);
  a.meta["run"] = "second";
  a.model.insert("extra", filled({2}, 9.0f));
  io::save_checkpoint(tmp.path, a);
  io::Checkpoint b = io::load_checkpoint(tmp.path + "/step-00000007");
  EXPECT_EQ(b.meta.at("run"), "second");
  EXPECT_TRUE(b.model.contains("extra"));
  EXPECT_EQ(names_in(tmp.path), (std::vector<std::string>{"latest", "step-00000007"}));
}

TEST(Checkpoint, FreshRunHasNothingToLoad) {
  TempDir tmp;
  EXPECT_FALSE(io::load_latest_checkpoint(tmp.file("never-created")).has_value());
  EXPECT_FALSE(io::load_latest_checkpoint(tmp.path).has_value());  // empty folder
  EXPECT_TRUE(io::list_checkpoints(tmp.file("never-created")).empty());
}

TEST(Checkpoint, InterruptedSavesAreIgnoredReportedAndCleanedUp) {
  TempDir tmp;
  io::save_checkpoint(tmp.path, checkpoint_at(1, 1));
  // What a crash mid-save leaves: a partial temporary folder, a pruning leftover, a half
  // written `latest` temporary.
  fs::create_directory(tmp.file(".tmp-step-00000002-99-0-1"));
  write_all(tmp.file(".tmp-step-00000002-99-0-1/model.safetensors"), "partial");
  fs::create_directory(tmp.file(".trash-step-00000000-99-1-1"));
  write_all(tmp.file(".latest.tmp-99-2-1"), "step-0000");
  std::vector<std::string> notes;
  auto c = io::load_latest_checkpoint(tmp.path, Device::cpu(), &notes);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->step, 1);
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_MATCH(notes[0], has_substr(".tmp-step-00000002-99-0-1: left by an interrupted save"));
  EXPECT_MATCH(notes[1], has_substr(".trash-step-00000000-99-1-1"));
  io::save_checkpoint(tmp.path, checkpoint_at(2, 1));
  EXPECT_EQ(names_in(tmp.path), (std::vector<std::string>{"latest", "step-00000001", "step-00000002"}));
}

TEST(Checkpoint, BrokenLatestFallsBackToNewestLoadable) {
  TempDir tmp;
  for (int64_t s = 1; s <= 3; ++s) io::save_checkpoint(tmp.path, checkpoint_at(s, 1), 0);
  std::vector<std::string> notes;

  // `latest` names a folder that is gone.
  fs::remove_all(tmp.file("step-00000003"));
  auto c = io::load_latest_checkpoint(tmp.path, Device::cpu(), &notes);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->step, 2);
  EXPECT_TRUE(consistent(*c, 1));
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_MATCH(notes[0], has_substr("latest names 'step-00000003', which does not load"));
  EXPECT_MATCH(notes[0], has_substr("no such checkpoint folder"));
  EXPECT_MATCH(notes[1], has_substr("loaded " + tmp.path + "/step-00000002 instead"));

  // `latest` is garbage.
  notes.clear();
  write_all(tmp.file("latest"), "../../etc\n");
  c = io::load_latest_checkpoint(tmp.path, Device::cpu(), &notes);
  EXPECT_EQ(c->step, 2);
  EXPECT_MATCH(notes.at(0), has_substr("does not name a step-N folder"));

  // `latest` is missing; the newest folder has a damaged file: skipped, reported.
  notes.clear();
  fs::remove(tmp.file("latest"));
  std::string model = tmp.file("step-00000002/model.safetensors");
  std::string bytes = read_all(model);
  write_all(model, bytes.substr(0, bytes.size() - 1));
  c = io::load_latest_checkpoint(tmp.path, Device::cpu(), &notes);
  EXPECT_EQ(c->step, 1);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_MATCH(notes[0], has_substr("skipping " + tmp.path + "/step-00000002: [load_checkpoint] " + model));

  // Nothing loads: an error, not a silent fresh start.
  fs::remove(tmp.file("step-00000001/optimizer.safetensors"));
  std::string msg = test::message_of<IOError>([&] { io::load_latest_checkpoint(tmp.path, Device::cpu(), &notes); });
  EXPECT_MATCH(msg, has_substr("[load_latest_checkpoint] " + tmp.path + ": checkpoints exist but none loads"));
  EXPECT_MATCH(msg, has_substr("incomplete checkpoint, missing optimizer.safetensors"));
}

TEST(Checkpoint, LoadErrorsNameThePath) {
  TempDir tmp;
  std::string missing = tmp.file("step-00000009");
  EXPECT_MATCH(test::message_of<IOError>([&] { io::load_checkpoint(missing); }),
               has_substr("[load_checkpoint] " + missing + ": no such checkpoint folder"));
  io::save_checkpoint(tmp.path, checkpoint_at(4, 1));
  std::string folder = tmp.file("step-00000004");
  fs::remove(folder + "/scheduler.safetensors");
  fs::remove(folder + "/meta.safetensors");
  EXPECT_MATCH(test::message_of<IOError>([&] { io::load_checkpoint(folder); }),
               has_substr(folder + ": incomplete checkpoint, missing scheduler.safetensors, meta.safetensors"));
  // A folder renamed by hand to another step is inconsistent.
  io::save_checkpoint(tmp.path, checkpoint_at(5, 1));
  fs::rename(tmp.file("step-00000005"), tmp.file("step-00000006"));
  EXPECT_MATCH(test::message_of<IOError>([&] { io::load_checkpoint(tmp.file("step-00000006")); }),
               has_substr("folder is named for step 6 but holds step 5"));
  // A meta file without the bookkeeping entries.
  io::save_safetensors(StateDict(), tmp.file("step-00000006/meta.safetensors"));
  EXPECT_MATCH(test::message_of<IOError>([&] { io::load_checkpoint(tmp.file("step-00000006")); }),
               has_substr("meta.safetensors: missing or malformed entry 'format_version'"));
}

TEST(Checkpoint, SaveErrorsNameThePath) {
  TempDir tmp;
  write_all(tmp.file("file"), "not a folder");
  std::string under_file = tmp.file("file/ckpt");
  std::string msg = test::message_of<IOError>([&] { io::save_checkpoint(under_file, checkpoint_at(1, 1)); });
  EXPECT_MATCH(msg, has_substr("[save_checkpoint] " + under_file + ": cannot create checkpoint folder"));
  msg = test::message_of<IOError>([&] { io::save_checkpoint(tmp.file("file"), checkpoint_at(1, 1)); });
  EXPECT_MATCH(msg, has_substr(tmp.file("file")));
  EXPECT_MATCH(test::message_of<ValueError>([&] { io::save_checkpoint(tmp.path, checkpoint_at(-1, 1)); }),
               has_substr("step must be non-negative"));

  // A bad tensor fails the save before anything becomes visible; no leftovers.
  io::save_checkpoint(tmp.file("ok"), checkpoint_at(1, 1));
  io::Checkpoint bad = checkpoint_at(2, 1);
  bad.optimizer.insert("broken", Tensor());
  EXPECT_MATCH(test::message_of<ValueError>([&] { io::save_checkpoint(tmp.file("ok"), bad); }),
               has_substr("'broken' is undefined"));
  EXPECT_EQ(names_in(tmp.file("ok")), (std::vector<std::string>{"latest", "step-00000001"}));
}

TEST(Checkpoint, PermissionDeniedNamesThePath) {
  if (::geteuid() == 0) GTEST_SKIP() << "permission checks do not apply to root";
  TempDir tmp;
  io::save_checkpoint(tmp.file("ok"), checkpoint_at(1, 1));
  std::string msg;
  fs::permissions(tmp.file("ok"), fs::perms::owner_read | fs::perms::owner_exec);
  msg = test::message_of<IOError>([&] { io::save_checkpoint(tmp.file("ok"), checkpoint_at(3, 1)); });
  EXPECT_MATCH(msg, has_substr(tmp.file("ok")));
  EXPECT_MATCH(msg, has_substr("Permission denied"));
  fs::permissions(tmp.file("ok"), fs::perms::owner_all);
  EXPECT_EQ(io::load_latest_checkpoint(tmp.file("ok"))->step, 1);
}

// Note [Checkpoint crash safety] under fire. The child builds its tensors with raw stores and
// only calls save_checkpoint, which touches no ops (so no OpenMP runtime after fork()).
TEST(CheckpointCrash, SigkillDuringSavesNeverLosesTheLastCheckpoint) {
  using Clock = std::chrono::steady_clock;
  TempDir tmp;
  std::string dir = tmp.file("ckpt");
  auto t0 = Clock::now();
  io::save_checkpoint(dir, checkpoint_at(0), 2);
  double save_us = double(std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count());
  // Kill within a few save-durations, so kills land in every phase of a save. A loaded machine
  // (a parallel build, the sanitizer run) can make the child's start slower than a few saves:
  // while no round has let a save complete, the window doubles every 10 rounds.
  double window_us = 4.0 * save_us + 200.0;
  std::mt19937_64 rng(2024);

  int64_t last = 0;
  int rounds = 0, progressed = 0;
  // The deadline only guards against a machine so slow that 60 rounds never finish; the rounds
  // cap ends the test in about a second on a quiet one.
  auto deadline = Clock::now() + std::chrono::seconds(60);
  while (rounds < 60 && Clock::now() < deadline) {
    if (rounds > 0 && rounds % 10 == 0 && progressed == 0) window_us *= 2;
    std::uniform_real_distribution<double> delay_us(0.0, window_us);
    std::fflush(nullptr);  // nothing buffered is written twice by the child
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0) << "fork failed";
    if (pid == 0) {
      try {
        for (int64_t s = last + 1;; ++s) io::save_checkpoint(dir, checkpoint_at(s), 2);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "child: %s\n", e.what());
      }
      ::_exit(3);
    }
    ::usleep(useconds_t(delay_us(rng)));
    ::kill(pid, SIGKILL);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
        << "the saving child stopped on its own (status " << status << ")";

    std::vector<std::string> notes;
    auto c = io::load_latest_checkpoint(dir, Device::cpu(), &notes);
    ASSERT_TRUE(c.has_value()) << "round " << rounds;
    ASSERT_TRUE(consistent(*c)) << "round " << rounds;
    ASSERT_GE(c->step, last) << "round " << rounds << ": a checkpoint was lost";
    // `latest` itself always loads: the fallback is for damage, not for crashes. The only
    // notes allowed are about leftovers of the killed save.
    for (const auto& n : notes)
      ASSERT_TRUE(n.rfind("ignoring ", 0) == 0 && n.find("interrupted") != std::string::npos) << n;
    // No partial step-N folder is ever visible: every one loads and is consistent.
    for (const auto& e : io::list_checkpoints(dir))
      ASSERT_TRUE(consistent(io::load_checkpoint(e.path))) << e.path;
    progressed += c->step > last;
    last = c->step;
    ++rounds;
  }
  EXPECT_GE(rounds, 20);
  EXPECT_GT(progressed, 0) << "no save ever completed between kills; the test tested nothing";
  RecordProperty("rounds", rounds);
  RecordProperty("progressed", progressed);
  RecordProperty("last_step", int(last));
  std::printf("kill test: %d rounds, %d made progress, reached step %lld, one save ~%.0f us\n", rounds,
              progressed, static_cast<long long>(last), save_us);
}


// Note [sharded state] on disk: two ranks (threads here, their barrier a std::barrier) write
// their pieces of one tensor; any range reads back from the pieces that hold it, whatever the
// split; a folder missing a rank's file is incomplete, and the plain loader says what it is.
TEST(ShardedCheckpoint, PiecesOfTwoRanksReadBackInAnySplit) {
  TempDir dir;
  const Tensor whole = arange(0, 10, 1, DType::f32).reshape({2, 5});
  const Tensor flat = whole.reshape({-1});
  std::barrier<> sync(2);
  std::string paths[2];
  auto rank = [&](int r) {
    io::ShardedCheckpoint c;
    c.step = 7;
    c.state.insert("w", flat.narrow(0, r == 0 ? 0 : 6, r == 0 ? 6 : 4).clone(), whole.sizes(), r == 0 ? 0 : 6);
    c.state.insert_whole("count", scalar_tensor(3, DType::i64));  // on both ranks, equal
    if (r == 0) {
      c.meta = {{"arch", "gpt"}};
      c.scheduler.set_scalar("last_epoch", 7);
    }
    paths[r] = io::save_sharded_checkpoint(dir.path, c, r, 2, [&] { sync.arrive_and_wait(); });
  };
  std::thread t1(rank, 1);
  rank(0);
  t1.join();
  EXPECT_EQ(paths[0], paths[1]);
  io::ShardedCheckpointReader reader(paths[0]);
  EXPECT_EQ(reader.saved_world_size(), 2);
  EXPECT_EQ(reader.step(), 7);
  EXPECT_EQ(reader.meta().at("arch"), "gpt");
  EXPECT_EQ(reader.scheduler().scalar("last_epoch"), 7.0);
  EXPECT_EQ(reader.keys(), (std::vector<std::string>{"count", "w"}));
  EXPECT_EQ(reader.shape("w"), Shape({2, 5}));
  EXPECT_EQ(reader.read("w", 0, 10).to_vector<float>(), flat.to_vector<float>());
  EXPECT_EQ(reader.read("w", 3, 5).to_vector<float>(), flat.narrow(0, 3, 5).to_vector<float>());  // across both files
  EXPECT_EQ(reader.read("count", 0, 1).item<int64_t>(), 3);
  EXPECT_THROW(reader.read("w", 8, 3), ValueError);
  EXPECT_THROW(reader.shape("v"), ValueError);
  auto latest = io::open_latest_sharded_checkpoint(dir.path);
  ASSERT_TRUE(latest);
  EXPECT_EQ(latest->path(), paths[0]);
  // Not a plain checkpoint, and incomplete without rank 1's file.
  try {
    io::load_checkpoint(paths[0]);
    FAIL() << "a sharded folder loaded as a plain checkpoint";
  } catch (const IOError& e) {
    EXPECT_MATCH(std::string(e.what()), has_substr("sharded"));
  }
  fs::remove(paths[0] + "/rank-00001-of-00002.safetensors");
  try {
    io::ShardedCheckpointReader broken(paths[0]);
    FAIL() << "an incomplete sharded checkpoint opened";
  } catch (const IOError& e) {
    EXPECT_MATCH(std::string(e.what()), has_substr("missing rank-00001-of-00002.safetensors"));
  }
}

}  // namespace
}  // namespace ember
