// safetensors: round trips for every dtype and layout, interop with an independent numpy
// implementation (tests/fixtures/safetensors_check.py), and a corruption catalog in which
// every damaged file must raise ember::IOError naming the file and the problem, never crash.
#include <ember/io.h>

#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>

#include "support/test_support.h"

namespace ember {
namespace {

namespace fs = std::filesystem;
using io::Metadata;

// Matchers without gmock: EXPECT_MATCH(message, has_substr("...")) << context.
#define EXPECT_MATCH(value, matcher) EXPECT_TRUE((matcher)(value))
auto has_substr(std::string sub) {
  return [sub](const std::string& s) -> ::testing::AssertionResult {
    if (s.find(sub) != std::string::npos) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "\"" << sub << "\" is not in \"" << s << "\"";
  };
}
auto starts_with(std::string prefix) {
  return [prefix](const std::string& s) -> ::testing::AssertionResult {
    if (s.rfind(prefix, 0) == 0) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "\"" << s << "\" does not start with \"" << prefix << "\"";
  };
}

struct TempDir {
  std::string path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "ember-io-XXXXXX").string();
    EXPECT_NE(::mkdtemp(tmpl.data()), nullptr);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
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

// The bytes of a tensor in row-major order: the exact comparison (NaN payloads, -0.0).
std::string bytes_of(const Tensor& t) {
  Tensor h = t.detach().to(Device::cpu()).contiguous();
  return std::string(static_cast<const char*>(h.data_ptr()), size_t(h.numel()) * h.element_size());
}

// A CPU tensor from raw element bits (uint16 for f16/bf16, bool as uint8, ...).
template <class T>
Tensor from_bits(const std::vector<T>& v, const Shape& shape, DType dtype) {
  Tensor t = detail::make_tensor(shape, dtype, Device::cpu());
  EXPECT_EQ(sizeof(T), itemsize(dtype));
  EXPECT_EQ(int64_t(v.size()), t.numel());
  if (!v.empty()) std::memcpy(t.data_ptr(), v.data(), v.size() * sizeof(T));
  return t;
}

void expect_same(const StateDict& got, const StateDict& want) {
  ASSERT_EQ(got.keys(), want.keys());
  for (const auto& [name, w] : want) {
    const Tensor& g = got.at(name);
    EXPECT_EQ(g.dtype(), w.dtype()) << name;
    EXPECT_EQ(g.sizes(), w.sizes()) << name;
    // (Only non-empty: core's is_contiguous() says false for some empty shapes like [2, 0, 3].)
    if (g.numel() > 0) {
      EXPECT_TRUE(g.is_contiguous()) << name;
    }
    EXPECT_EQ(bytes_of(g), bytes_of(w)) << name;
  }
}

// One tensor of each dtype with values that exercise its range.
StateDict every_dtype(Device device = Device::cpu()) {
  manual_seed(7);
  StateDict sd;
  sd.insert("f32", randn({3, 5}, TensorOptions(DType::f32).device(device)));
  sd.insert("f64", randn({4, 2}, TensorOptions(DType::f64).device(device)));
  sd.insert("f16", randn({7}, TensorOptions(DType::f16).device(device)));
  sd.insert("bf16", randn({2, 3, 2}, TensorOptions(DType::bf16).device(device)));
  sd.insert("i64", tensor<int64_t>({std::numeric_limits<int64_t>::min(), -1, 0,
                                    std::numeric_limits<int64_t>::max()}, {2, 2}).to(device));
  sd.insert("i32", tensor<int32_t>({std::numeric_limits<int32_t>::min(), 0, 12345,
                                    std::numeric_limits<int32_t>::max()}, {4}).to(device));
  sd.insert("u8", tensor<uint8_t>({0, 1, 127, 128, 255}, {5}).to(device));
  sd.insert("bool", from_bits<uint8_t>({1, 0, 0, 1, 1, 0}, {2, 3}, DType::b8).to(device));
  return sd;
}

TEST(Safetensors, RoundTripEveryDType) {
  TempDir tmp;
  StateDict sd = every_dtype();
  io::save_safetensors(sd, tmp.file("a.safetensors"));
  expect_same(io::load_safetensors(tmp.file("a.safetensors")), sd);
}

TEST(Safetensors, ZeroDimEmptyAndOrder) {
  TempDir tmp;
  StateDict sd;
  // Deliberately not alphabetical, with empty tensors between and around non-empty ones:
  // the load order must be the save order.
  sd.insert("zeta.empty", zeros({0}));
  sd.insert("zeta", arange(6.0, DType::f32).view({2, 3}));
  sd.insert("alpha.empty", zeros({2, 0, 3}, DType::i64));
  sd.set_scalar("lr", 0.125);
  sd.set_int("step", -42);
  sd.insert("mid", scalar_tensor(1.5, DType::bf16));
  sd.insert("tail.empty", zeros({0, 0}, DType::bf16));
  io::save_safetensors(sd, tmp.file("z.safetensors"));
  StateDict got = io::load_safetensors(tmp.file("z.safetensors"));
  expect_same(got, sd);
  EXPECT_EQ(got.at("lr").dim(), 0);
  EXPECT_EQ(got.scalar("lr"), 0.125);
  EXPECT_EQ(got.integer("step"), -42);
  EXPECT_EQ(got.at("alpha.empty").sizes(), Shape({2, 0, 3}));

  // An empty state dict is a valid (8 + 8 byte) file.
  io::save_safetensors(StateDict(), tmp.file("empty.safetensors"));
  EXPECT_EQ(read_all(tmp.file("empty.safetensors")).size(), 16u);
  EXPECT_TRUE(io::load_safetensors(tmp.file("empty.safetensors")).empty());
}

TEST(Safetensors, NonContiguousViewsAreWrittenContiguous) {
  TempDir tmp;
  Tensor base = arange(0.0, 60.0, 1.0, DType::f32).view({3, 4, 5});
  StateDict sd;
  sd.insert("transposed", base.transpose(0, 2));               // [5, 4, 3]
  sd.insert("strided", base.slice(2, 1, 5, 2));                // step 2 along the last dim
  sd.insert("offset", base.select(0, 2).narrow(0, 1, 2));      // nonzero storage offset
  sd.insert("expanded", arange(3.0, DType::f64).view({3, 1}).expand({3, 4}));  // stride 0
  for (const auto& [name, t] : sd) ASSERT_FALSE(t.is_contiguous() && t.storage_offset() == 0) << name;
  io::save_safetensors(sd, tmp.file("v.safetensors"));
  StateDict got = io::load_safetensors(tmp.file("v.safetensors"));
  expect_same(got, sd);
  EXPECT_TRUE(test::all_close(got.at("transposed"), base.permute({2, 1, 0}).contiguous()));
  EXPECT_EQ(got.at("offset").to_vector<double>(), (std::vector<double>{45, 46, 47, 48, 49, 50, 51, 52, 53, 54}));
  // The file holds exactly the logical bytes: no storage beyond the views leaks in.
  size_t data = 0;
  for (const auto& [name, t] : sd) data += size_t(t.numel()) * t.element_size();
  auto h = io::read_safetensors_header(tmp.file("v.safetensors"));
  EXPECT_EQ(read_all(tmp.file("v.safetensors")).size(), h.data_start + data);
}

TEST(Safetensors, ParametersRequiringGradSaveWithoutRecording) {
  TempDir tmp;
  Tensor w = randn({4, 3}).requires_grad_(true);
  StateDict sd;
  sd.insert("w", w);
  sd.insert("wt", w.t());  // a differentiable view with a grad_fn
  io::save_safetensors(sd, tmp.file("g.safetensors"));
  StateDict got = io::load_safetensors(tmp.file("g.safetensors"));
  EXPECT_FALSE(got.at("w").requires_grad());
  EXPECT_EQ(bytes_of(got.at("w")), bytes_of(w));
  EXPECT_EQ(bytes_of(got.at("wt")), bytes_of(w.t()));
}

TEST(Safetensors, Metadata) {
  TempDir tmp;
  Metadata meta{{"format", "pt"}, {"note", "unicode \xc3\xbc \xe2\x9c\x93"}, {"empty", ""}};
  StateDict sd;
  sd.insert("x", ones({2}));
  io::save_safetensors(sd, tmp.file("m.safetensors"), meta);
  EXPECT_EQ(io::load_safetensors_metadata(tmp.file("m.safetensors")), meta);
  io::SafetensorsFile f = io::read_safetensors(tmp.file("m.safetensors"));
  EXPECT_EQ(f.metadata, meta);
  expect_same(f.tensors, sd);
  // No metadata given: none written, none read back.
  io::save_safetensors(sd, tmp.file("n.safetensors"));
  EXPECT_TRUE(io::load_safetensors_metadata(tmp.file("n.safetensors")).empty());
  EXPECT_EQ(read_all(tmp.file("n.safetensors")).find("__metadata__"), std::string::npos);
}

TEST(Safetensors, HeaderLayoutAndBytesApi) {
  TempDir tmp;
  StateDict sd = every_dtype();
  io::save_safetensors(sd, tmp.file("b.safetensors"), {{"k", "v"}});
  std::string file = read_all(tmp.file("b.safetensors"));
  // The file is exactly to_safetensors_bytes, and that parses back.
  EXPECT_EQ(file, io::to_safetensors_bytes(sd, {{"k", "v"}}));
  io::SafetensorsFile back = io::from_safetensors_bytes(file);
  expect_same(back.tensors, sd);
  EXPECT_EQ(back.metadata, (Metadata{{"k", "v"}}));
  // 8-byte LE length, JSON padded with spaces to keep the data 8-byte aligned.
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(file[size_t(i)]);
  EXPECT_EQ((8 + n) % 8, 0u);
  std::string header = file.substr(8, n);
  EXPECT_EQ(header.substr(0, 16), "{\"__metadata__\":");
  EXPECT_EQ(header.find_last_not_of(' '), header.rfind('}'));
  auto h = io::read_safetensors_header(tmp.file("b.safetensors"));
  ASSERT_EQ(h.tensors.size(), sd.size());
  EXPECT_EQ(h.data_start, 8 + n);
  EXPECT_EQ(h.tensors[0].name, "f32");
  EXPECT_EQ(h.tensors[0].begin, 0u);
  EXPECT_EQ(h.tensors[0].end, 60u);
  EXPECT_EQ(h.tensors[1].begin, 60u);
  EXPECT_EQ(io::safetensors_dtype_name(DType::bf16), std::string("BF16"));
}

TEST(Safetensors, SaveIsAtomicAndLeavesNoTemporaries) {
  TempDir tmp;
  std::string path = tmp.file("w.safetensors");
  StateDict a;
  a.insert("x", full({3}, 1.0));
  io::save_safetensors(a, path);
  StateDict b;
  b.insert("y", full({5}, 2.0, DType::f64));
  io::save_safetensors(b, path);  // replaces
  expect_same(io::load_safetensors(path), b);

  // A failing save (bad argument) leaves the old file and no temporary behind.
  StateDict bad;
  bad.insert("ok", ones({2}));
  bad.insert("undefined", Tensor());
  EXPECT_MATCH(test::message_of<ValueError>([&] { io::save_safetensors(bad, path); }),
              has_substr("'undefined' is undefined"));
  StateDict reserved;
  reserved.insert("__metadata__", ones({1}));
  EXPECT_MATCH(test::message_of<ValueError>([&] { io::save_safetensors(reserved, path); }),
              has_substr("reserved"));
  expect_same(io::load_safetensors(path), b);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(tmp.path)) names.push_back(e.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"w.safetensors"});

  // Unwritable destination: IOError naming the path, and the reason.
  std::string missing = tmp.file("no/such/folder/x.safetensors");
  std::string msg = test::message_of<IOError>([&] { io::save_safetensors(a, missing); });
  EXPECT_MATCH(msg, has_substr("[save_safetensors]"));
  EXPECT_MATCH(msg, has_substr(missing));
  EXPECT_MATCH(msg, has_substr("No such file or directory"));
}

TEST(Safetensors, LoadErrorsNameTheFile) {
  TempDir tmp;
  std::string missing = tmp.file("missing.safetensors");
  std::string msg = test::message_of<IOError>([&] { io::load_safetensors(missing); });
  EXPECT_MATCH(msg, has_substr("[load_safetensors] " + missing));
  EXPECT_MATCH(msg, has_substr("No such file"));
  msg = test::message_of<IOError>([&] { io::load_safetensors(tmp.path); });
  EXPECT_MATCH(msg, has_substr("not a regular file"));
}

TEST(Safetensors, BoolBytesAreNormalized) {
  // Another writer may store any nonzero byte for true; a C++ bool must hold 0 or 1.
  std::string header = R"({"m":{"dtype":"BOOL","shape":[4],"data_offsets":[0,4]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string file(8, '\0');
  file[0] = char(header.size());
  file += header + std::string("\x00\x02\xff\x01", 4);
  Tensor m = io::from_safetensors_bytes(file).tensors.at("m");
  EXPECT_EQ(bytes_of(m), std::string("\x00\x01\x01\x01", 4));
}

class SafetensorsDevices : public ::testing::TestWithParam<Device> {};

TEST_P(SafetensorsDevices, SaveFromAndLoadOntoDevice) {
  Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  TempDir tmp;
  StateDict sd = every_dtype(dev);
  sd.insert("view", sd.at("f32").t());
  io::save_safetensors(sd, tmp.file("d.safetensors"));
  StateDict got = io::load_safetensors(tmp.file("d.safetensors"), dev);
  for (const auto& [name, t] : got) EXPECT_EQ(t.device(), dev) << name;
  expect_same(got, sd);
}
INSTANTIATE_TEST_SUITE_P(Devices, SafetensorsDevices, ::testing::ValuesIn(test::test_devices()),
                         test::device_label);

// ---- interop with the numpy implementation ----

// An interpreter with numpy: $EMBER_PYTHON, python3, or Debian's /usr/bin/python3 (a pyenv or
// venv python3 first on PATH may lack the Debian package python3-numpy).
const std::string& python_with_numpy() {
  static const std::string found = [] {
    std::vector<std::string> candidates;
    if (const char* e = std::getenv("EMBER_PYTHON")) candidates.push_back(e);
    candidates.push_back("python3");
    candidates.push_back("/usr/bin/python3");
    for (const auto& c : candidates)
      if (std::system((c + " -c 'import numpy' >/dev/null 2>&1").c_str()) == 0) return c;
    return std::string();
  }();
  return found;
}

std::string script() { return std::string(EMBER_TEST_DATA_DIR) + "/safetensors_check.py"; }

// Runs the script; returns its exit status and appends its output to `out`.
int run_script(const std::string& args, const TempDir& tmp, std::string* out) {
  std::string log = tmp.file("script.log");
  std::string cmd = python_with_numpy() + " '" + script() + "' " + args + " >'" + log + "' 2>&1";
  int rc = std::system(cmd.c_str());
  *out = cmd + "\n" + read_all(log);
  return rc;
}

#define EMBER_REQUIRE_NUMPY()                                                            \
  do {                                                                                   \
    if (python_with_numpy().empty())                                                     \
      FAIL() << "python3 with numpy is required (Debian: python3-numpy, scripts/setup.sh; " \
                "or set EMBER_PYTHON)";                                                  \
  } while (0)

std::string json_number(double v) {
  // Strings where JSON has no number: NaN, infinities, and -0 (which "-0" would lose).
  if (std::isnan(v)) return "\"nan\"";
  if (std::isinf(v)) return v > 0 ? "\"inf\"" : "\"-inf\"";
  if (v == 0 && std::signbit(v)) return "\"-0.0\"";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string json_string(const std::string& s) {  // the test's strings need only these escapes
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// The spec the script checks: names in byte order, dtype, shape, values.
// `expected` overrides the values of a tensor with literal ones (16-bit floats: the decoded
// values are given as numbers, so ember's own conversions are not what is being trusted).
std::string spec_json(const StateDict& sd, const Metadata& meta,
                      const std::map<std::string, std::vector<double>>& expected) {
  std::ostringstream s;
  s << "{\"order\": [";
  bool first = true;
  for (const auto& [name, t] : sd) s << (first ? "" : ", ") << json_string(name), first = false;
  s << "],\n \"metadata\": {";
  first = true;
  for (const auto& [k, v] : meta) s << (first ? "" : ", ") << json_string(k) << ": " << json_string(v), first = false;
  s << "},\n \"tensors\": {";
  first = true;
  for (const auto& [name, t] : sd) {
    s << (first ? "\n  " : ",\n  ") << json_string(name) << ": {\"dtype\": \""
      << io::safetensors_dtype_name(t.dtype()) << "\", \"shape\": [";
    for (size_t i = 0; i < t.sizes().size(); ++i) s << (i ? ", " : "") << t.sizes()[i];
    s << "], \"values\": [";
    if (auto it = expected.find(name); it != expected.end()) {
      for (size_t i = 0; i < it->second.size(); ++i) s << (i ? ", " : "") << json_number(it->second[i]);
    } else if (t.is_floating_point()) {
      auto v = t.to_vector<double>();
      for (size_t i = 0; i < v.size(); ++i) s << (i ? ", " : "") << json_number(v[i]);
    } else {
      auto v = t.to_vector<int64_t>();
      for (size_t i = 0; i < v.size(); ++i) s << (i ? ", " : "") << v[i];
    }
    s << "]}";
    first = false;
  }
  s << "}}\n";
  return s.str();
}

TEST(SafetensorsInterop, NumpyReadsWhatEmberWrites) {
  EMBER_REQUIRE_NUMPY();
  TempDir tmp;
  const double inf = std::numeric_limits<double>::infinity();
  StateDict sd;
  sd.insert("layer.0.weight", randn({3, 4}).t());  // non-contiguous
  sd.insert("f64", tensor<double>({1.0 / 3, -inf, inf, std::nan(""), -0.0, 5e-324, 1.7e308}, {7}));
  // f16 bits: 0.5, -65504, 2^-24 (smallest subnormal), -0, inf, nearest half to 1/3.
  sd.insert("f16", from_bits<uint16_t>({0x3800, 0xfbff, 0x0001, 0x8000, 0x7c00, 0x3555}, {2, 3}, DType::f16));
  // bf16 bits: 1, -3.140625, 2^100, -2^-130 (subnormal), nearest bf16 to 1/3.
  sd.insert("bf16", from_bits<uint16_t>({0x3f80, 0xc049, 0x7180, 0x8008, 0x3eab}, {5}, DType::bf16));
  sd.insert("i64", tensor<int64_t>({std::numeric_limits<int64_t>::min(), -1, 0,
                                    std::numeric_limits<int64_t>::max()}, {4}));
  sd.insert("i32", tensor<int32_t>({std::numeric_limits<int32_t>::min(),
                                    std::numeric_limits<int32_t>::max(), 5}, {3, 1}));
  sd.insert("u8", tensor<uint8_t>({0, 255, 17, 128}, {2, 2}));
  sd.insert("mask", from_bits<uint8_t>({1, 0, 1, 1}, {4}, DType::b8));
  sd.set_scalar("lr", 2.5);
  sd.set_int("step", 7);
  sd.insert("empty", zeros({0, 3}));
  sd.insert("empty.i32", zeros({2, 0}, DType::i32));
  sd.insert("strided", arange(0.0, 20.0, 1.0, DType::f32).slice(0, 1, 20, 3));
  Metadata meta{{"framework", "ember"}, {"note", "caf\xc3\xa9"}};
  std::map<std::string, std::vector<double>> expected{
      {"f16", {0.5, -65504.0, std::ldexp(1.0, -24), -0.0, inf, 0.333251953125}},
      {"bf16", {1.0, -3.140625, std::ldexp(1.0, 100), -std::ldexp(1.0, -130), 0.333984375}},
  };
  io::save_safetensors(sd, tmp.file("ember.safetensors"), meta);
  write_all(tmp.file("spec.json"), spec_json(sd, meta, expected));
  std::string out;
  EXPECT_EQ(run_script("check '" + tmp.file("ember.safetensors") + "' '" + tmp.file("spec.json") + "'",
                       tmp, &out), 0) << out;

  // The checker is not vacuous: a wrong expectation fails it.
  expected["bf16"][1] = -3.15625;
  write_all(tmp.file("bad.json"), spec_json(sd, meta, expected));
  EXPECT_NE(run_script("check '" + tmp.file("ember.safetensors") + "' '" + tmp.file("bad.json") + "'",
                       tmp, &out), 0) << out;
  EXPECT_MATCH(out, has_substr("bf16: element 1"));
}

TEST(SafetensorsInterop, EmberReadsWhatNumpyWrites) {
  EMBER_REQUIRE_NUMPY();
  TempDir tmp;
  std::string path = tmp.file("numpy.safetensors");
  std::string out;
  ASSERT_EQ(run_script("write '" + path + "'", tmp, &out), 0) << out;
  io::SafetensorsFile f = io::read_safetensors(path);
  EXPECT_EQ(f.metadata, (Metadata{{"format", "np"}, {"source", "safetensors_check.py"}}));
  // Byte order of the file (alignment, then name), not the header's alphabetical order.
  EXPECT_EQ(f.tensors.keys(), (std::vector<std::string>{"empty.i64", "idx.i64", "w.f64", "empty", "i.i32",
                                                        "scalar", "weight.f32", "b.bf16", "h.f16",
                                                        "mask.bool", "u.u8"}));
  const StateDict& t = f.tensors;
  auto expect_values = [&](const char* name, DType dtype, const Shape& shape, const std::vector<double>& v) {
    SCOPED_TRACE(name);
    const Tensor& x = t.at(name);
    EXPECT_EQ(x.dtype(), dtype);
    EXPECT_EQ(x.sizes(), shape);
    auto got = x.to_vector<double>();
    ASSERT_EQ(got.size(), v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      EXPECT_EQ(got[i], v[i]) << "element " << i;
      EXPECT_EQ(std::signbit(got[i]), std::signbit(v[i])) << "element " << i;
    }
  };
  expect_values("weight.f32", DType::f32, {2, 3}, {-0.5, -0.25, 0, 0.25, 0.5, 0.75});
  expect_values("w.f64", DType::f64, {5},
                {1.0 / 3, -2.5e300, 5e-324, -0.0, std::numeric_limits<double>::infinity()});
  expect_values("h.f16", DType::f16, {2, 2}, {0.5, -65504.0, std::ldexp(1.0, -14), std::ldexp(1.0, -24)});
  expect_values("b.bf16", DType::bf16, {4}, {1.0, -3.140625, std::ldexp(1.0, 100), -std::ldexp(1.0, -130)});
  EXPECT_EQ(t.at("idx.i64").to_vector<int64_t>(),
            (std::vector<int64_t>{-(int64_t(1) << 62) - 3, -1, 0, (int64_t(1) << 62) + 5}));
  expect_values("i.i32", DType::i32, {3}, {-2147483648.0, 2147483647.0, 7});
  expect_values("u.u8", DType::u8, {2, 2}, {0, 1, 128, 255});
  expect_values("mask.bool", DType::b8, {3}, {1, 0, 1});
  expect_values("scalar", DType::f32, {}, {3.25});
  expect_values("empty", DType::f32, {0, 4}, {});
  expect_values("empty.i64", DType::i64, {3, 0}, {});

  // And ember writes it back in a form numpy accepts with the same values.
  io::save_safetensors(f.tensors, tmp.file("again.safetensors"), f.metadata);
  write_all(tmp.file("spec.json"), spec_json(f.tensors, f.metadata, {}));
  EXPECT_EQ(run_script("check '" + tmp.file("again.safetensors") + "' '" + tmp.file("spec.json") + "'",
                       tmp, &out), 0) << out;
}

// ---- corruption catalog ----

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[size_t(i)] = char((v >> (8 * i)) & 0xff);
  return s;
}

// A file with the given header text (padded) followed by `data_bytes` zero bytes.
std::string craft(std::string header, size_t data_bytes) {
  header.append((8 - header.size() % 8) % 8, ' ');
  return le64(header.size()) + header + std::string(data_bytes, '\0');
}

// Loads `bytes` through a real file; returns the IOError message (or what happened instead).
std::string load_error(const TempDir& tmp, const std::string& bytes) {
  std::string path = tmp.file("bad.safetensors");
  write_all(path, bytes);
  return test::message_of<IOError>([&] { io::load_safetensors(path); });
}

TEST(SafetensorsCorruption, Catalog) {
  TempDir tmp;
  std::string path = tmp.file("bad.safetensors");
  struct Case {
    const char* what;
    std::string bytes;
    const char* expect;
  };
  const std::string f32_2x2 = R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})";
  std::vector<Case> cases = {
      {"empty file", "", "0 bytes, too short"},
      {"7 bytes", std::string(7, '\0'), "7 bytes, too short"},
      {"zero header length", le64(0), "not valid JSON"},
      {"huge header length", le64(~uint64_t(0)) + "{}", "exceeds the 2 bytes"},
      {"header length just past the end", le64(9) + "{}      ", "header length 9 exceeds the 8 bytes"},
      {"header length 2^63", le64(uint64_t(1) << 63) + std::string(64, ' '), "exceeds"},
      {"garbage header", le64(8) + "\x89PNG\r\n\x1a\n", "not valid JSON"},
      {"truncated JSON", craft(R"({"a":{"dtype":"F32","sha)", 0), "not valid JSON"},
      {"header not an object", craft("[1, 2, 3]", 0), "not a JSON object"},
      {"entry not an object", craft(R"({"a": 5})", 0), "entry of tensor 'a' is not an object"},
      {"missing data_offsets", craft(R"({"a":{"dtype":"F32","shape":[1]}})", 4), "lacks one of"},
      {"unknown dtype", craft(R"({"a":{"dtype":"I16","shape":[2],"data_offsets":[0,4]}})", 4),
       "unsupported dtype 'I16'"},
      {"fp8 dtype", craft(R"({"a":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}})", 2),
       "unsupported dtype 'F8_E4M3'"},
      {"dtype not a string", craft(R"({"a":{"dtype":4,"shape":[1],"data_offsets":[0,4]}})", 4),
       "dtype is not a string"},
      {"negative dim", craft(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4),
       "non-negative integer"},
      {"fractional dim", craft(R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4),
       "non-negative integer"},
      {"shape not an array", craft(R"({"a":{"dtype":"F32","shape":3,"data_offsets":[0,12]}})", 12),
       "shape is not an array"},
      {"overflowing shape",
       craft(R"({"a":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", 8),
       "impossibly large shape"},
      {"numel*itemsize overflow",
       craft(R"({"a":{"dtype":"F64","shape":[2305843009213693952,4],"data_offsets":[0,8]}})", 8),
       "impossibly large shape"},
      {"offsets too few", craft(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4),
       "data_offsets is not [begin, end]"},
      {"offsets negative", craft(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", 4),
       "non-negative integer"},
      {"offsets reversed", craft(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[4,0]}})", 4),
       "end before they begin"},
      {"shape/offset mismatch", craft(R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}})", 12),
       "hold 12 bytes but shape [2,2] of F32 needs 16"},
      {"offsets past the data", craft(f32_2x2, 8), "run past the data area of 8 bytes"},
      {"offsets huge", craft(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[18446744073709551614,18446744073709551615]}})", 1),
       "run past the data area"},
      {"overlap",
       craft(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12),
       "'a' [0, 8) and 'b' [4, 12) overlap"},
      {"same range twice",
       craft(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}})", 8),
       "overlap"},
      {"gap",
       craft(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})", 12),
       "bytes [4, 8) of the data area belong to no tensor"},
      {"gap at the start", craft(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8),
       "bytes [0, 4)"},
      {"trailing bytes", craft(f32_2x2, 20), "the data area has 20 bytes but the tensors cover 16"},
      {"duplicate name",
       craft(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8),
       "header names 'a' twice"},
      {"duplicate field", craft(R"({"a":{"dtype":"F32","dtype":"F64","shape":[1],"data_offsets":[0,4]}})", 4),
       "header names 'dtype' twice"},
      {"metadata not an object", craft(R"({"__metadata__":[1]})", 0), "__metadata__ is not an object"},
      {"metadata value not a string", craft(R"({"__metadata__":{"epoch":3}})", 0),
       "__metadata__ value of 'epoch' is not a string"},
  };
  for (const auto& c : cases) {
    std::string msg = load_error(tmp, c.bytes);
    EXPECT_MATCH(msg, has_substr("[load_safetensors] " + path + ": ")) << c.what;
    EXPECT_MATCH(msg, has_substr(c.expect)) << c.what;
    // The in-memory parser applies the same rules.
    EXPECT_MATCH(test::message_of<IOError>([&] { io::from_safetensors_bytes(c.bytes); }),
                has_substr(c.expect)) << c.what;
    // Header-only reads validate as much.
    EXPECT_MATCH(test::message_of<IOError>([&] { io::load_safetensors_metadata(path); }),
                has_substr(c.expect)) << c.what;
  }
  // Sanity: the well-formed variants of the crafted files load.
  write_all(path, craft(f32_2x2, 16));
  EXPECT_EQ(io::load_safetensors(path).at("a").sizes(), Shape({2, 2}));
}

TEST(SafetensorsCorruption, EveryTruncationFails) {
  TempDir tmp;
  StateDict sd = every_dtype();
  sd.insert("empty", zeros({0}));
  std::string file = io::to_safetensors_bytes(sd, {{"a", "b"}});
  std::string path = tmp.file("t.safetensors");
  for (size_t len = 0; len < file.size(); ++len) {
    std::string cut = file.substr(0, len);
    EXPECT_MATCH(test::message_of<IOError>([&] { io::from_safetensors_bytes(cut, Device::cpu(), "cut"); }),
                starts_with("[load_safetensors] cut: ")) << "truncated to " << len;
    if (len % 7 == 0 || len + 8 > file.size()) {  // a sample through real files too
      write_all(path, cut);
      EXPECT_MATCH(test::message_of<IOError>([&] { io::load_safetensors(path); }),
                  has_substr(path)) << "truncated to " << len;
    }
  }
  // Extending the file is as wrong as cutting it.
  EXPECT_MATCH(test::message_of<IOError>([&] { io::from_safetensors_bytes(file + "x"); }),
              has_substr("cover"));
}

TEST(SafetensorsCorruption, RandomDamageNeverCrashes) {
  // Flip, overwrite and splice bytes anywhere (mostly the header, where the parsing is): every
  // result either loads or throws IOError; nothing else escapes, nothing crashes.
  StateDict sd = every_dtype();
  std::string file = io::to_safetensors_bytes(sd, {{"k", "v"}});
  uint64_t header_end = 0;
  for (int i = 7; i >= 0; --i) header_end = (header_end << 8) | uint8_t(file[size_t(i)]);
  header_end += 8;
  std::mt19937_64 rng(1234);
  const std::string alphabet = "{}[]\",:0123456789-.eE \\uF32BOOLnull";
  int loaded = 0, rejected = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string bad = file;
    int edits = 1 + int(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      size_t pos = rng() % 4 == 0 ? rng() % bad.size() : rng() % header_end;
      switch (rng() % 4) {
        case 0: bad[pos] = char(rng()); break;
        case 1: bad[pos] = alphabet[rng() % alphabet.size()]; break;
        case 2: bad.erase(pos, 1 + rng() % 8); break;
        default: bad.insert(pos, 1, alphabet[rng() % alphabet.size()]); break;
      }
      if (bad.empty()) bad.push_back('x');
    }
    try {
      io::from_safetensors_bytes(bad);
      ++loaded;
    } catch (const IOError& e) {
      EXPECT_MATCH(e.what(), starts_with("[load_safetensors] <memory>: "));
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 2500);  // nearly every header edit must be caught
  EXPECT_GT(loaded, 0);       // some edits (data bytes, spaces) are harmless
}

}  // namespace
}  // namespace ember
