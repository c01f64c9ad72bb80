#include "support/test_support.h"
#include "support/onnx_runtime.h"

#include "ember/ops/conv.h"

#include <nlohmann/json.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace ember::test {

// TF32 off in every test process that links this library (every suite): a test comparing f32
// CUDA with the CPU then compares exact f32 GEMMs unless it asks for TF32 itself
// (cuda::AllowTF32Guard(true)). Rnn.CudaMatchesCpu forgot the guard and failed on the first
// GPU run (LSTM projections through cuBLASLt's TF32); now no test can forget it. A static
// initializer, not a gtest environment, so it holds before any test-time static runs too.
[[maybe_unused]] static const bool exact_f32_in_tests = [] {
  cuda::set_allow_tf32(false);
  return true;
}();

std::vector<Device> test_devices() {
  std::vector<Device> d{Device::cpu()};
  // Always list CUDA so the cases show up (and skip) in CI: that keeps the suite identical.
  d.push_back(Device::cuda(0));
  return d;
}

std::vector<Device> cuda_devices() { return {Device::cuda(0)}; }

bool cuda_expected() {
  if (const char* r = std::getenv("EMBER_REQUIRE_CUDA"); r != nullptr && *r != '\0')
    return std::string(r) != "0";
  // CUDA_VISIBLE_DEVICES="" or "-1" hides the GPUs on purpose: nothing is expected then.
  if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES"); v != nullptr && (*v == '\0' || *v == '-'))
    return false;
  std::error_code ec;
  return std::filesystem::exists("/dev/nvidia0", ec) || std::filesystem::exists("/dev/nvidiactl", ec);
}

std::string device_label(const ::testing::TestParamInfo<Device>& info) {
  return info.param.is_cpu() ? "cpu" : "cuda";
}

static ::testing::AssertionResult compare(const std::vector<double>& a, const Shape& a_shape,
                                          const std::vector<double>& b, double rtol,
                                          double atol) {
  if (a.size() != b.size())
    return ::testing::AssertionFailure() << "size mismatch: " << a.size() << " vs " << b.size()
                                         << " (actual shape " << str(a_shape) << ")";
  for (size_t i = 0; i < a.size(); ++i) {
    bool both_nan = std::isnan(a[i]) && std::isnan(b[i]);
    bool same_inf = std::isinf(a[i]) && a[i] == b[i];
    if (both_nan || same_inf) continue;
    // An infinity on either side matches only itself: |x - inf| <= rtol * inf would hold for
    // every x (and for -inf), so the relative bound cannot be used there.
    const bool any_inf = std::isinf(a[i]) || std::isinf(b[i]);
    if (any_inf || !(std::fabs(a[i] - b[i]) <= atol + rtol * std::fabs(b[i])))
      return ::testing::AssertionFailure() << "element " << i << ": actual " << a[i]
                                           << " expected " << b[i] << " (shape "
                                           << str(a_shape) << ")";
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult all_close(const Tensor& actual, const Tensor& expected, double rtol,
                                     double atol) {
  if (actual.sizes() != expected.sizes())
    return ::testing::AssertionFailure() << "shape " << str(actual.sizes()) << " vs expected "
                                         << str(expected.sizes());
  return compare(actual.to_vector<double>(), actual.sizes(), expected.to_vector<double>(), rtol,
                 atol);
}

::testing::AssertionResult all_close(const Tensor& actual, const std::vector<double>& expected,
                                     double rtol, double atol) {
  // A flat list stands for a 1-d tensor (or a 0-d one when it has one value): a result of
  // another shape with the same number of elements is a wrong result, not a match.
  const bool shape_ok = actual.dim() == 1 || (actual.dim() == 0 && expected.size() == 1);
  if (!shape_ok)
    return ::testing::AssertionFailure() << "shape " << str(actual.sizes()) << " vs a flat list of "
                                         << expected.size() << " values (compare with a tensor of the "
                                         << "expected shape instead)";
  return compare(actual.to_vector<double>(), actual.sizes(), expected, rtol, atol);
}

::testing::AssertionResult all_close(const Tensor& actual, const Shape& expected_shape,
                                     const std::vector<double>& expected, double rtol, double atol) {
  if (actual.sizes() != expected_shape)
    return ::testing::AssertionFailure() << "shape " << str(actual.sizes()) << " vs expected "
                                         << str(expected_shape);
  if (int64_t(expected.size()) != expected_shape.numel())
    return ::testing::AssertionFailure() << "the test's list has " << expected.size()
                                         << " values for shape " << str(expected_shape);
  return compare(actual.to_vector<double>(), actual.sizes(), expected, rtol, atol);
}

Tensor Fixture::tensor(DType dtype) const {
  return ember::tensor(values, shape, TensorOptions(dtype));
}

Fixture load_fixture(const std::string& file, const std::string& name) {
  std::string path = std::string(EMBER_TEST_DATA_DIR) + "/" + file;
  std::ifstream in(path);
  if (!in) throw IOError("[fixture] cannot open " + path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string key;
    ls >> key;
    if (key != name) continue;
    Fixture f;
    std::string tok;
    while (ls >> tok && tok != ":") f.shape.push_back(std::stoll(tok));
    double v;
    while (ls >> v) f.values.push_back(v);
    if (int64_t(f.values.size()) != f.shape.numel())
      throw IOError("[fixture] " + name + " in " + path + " has " +
                    std::to_string(f.values.size()) + " values for shape " + str(f.shape));
    return f;
  }
  throw IOError("[fixture] no entry '" + name + "' in " + path);
}

double cuda_rtol(DType dt) {
  switch (dt) {
    case DType::f64: return 1e-12;
    case DType::f32: return 1e-5;
    case DType::f16: return 2e-3;
    default: return 1.6e-2;
  }
}

::testing::AssertionResult close_to_cpu(const Tensor& cuda_result, const Tensor& cpu_result,
                                        double rtol) {
  if (!cuda_result.defined() || !cpu_result.defined())
    return cuda_result.defined() == cpu_result.defined() ? ::testing::AssertionSuccess()
                                                         : ::testing::AssertionFailure() << "one is undefined";
  if (!cuda_result.device().is_cuda())
    return ::testing::AssertionFailure() << "the CUDA result lives on " << cuda_result.device().str();
  if (cuda_result.dtype() != cpu_result.dtype() || cuda_result.sizes() != cpu_result.sizes())
    return ::testing::AssertionFailure()
           << dtype_name(cuda_result.dtype()) << " " << str(cuda_result.sizes()) << " vs "
           << dtype_name(cpu_result.dtype()) << " " << str(cpu_result.sizes());
  double scale = 0;
  for (double v : cpu_result.to_vector<double>())
    if (std::isfinite(v)) scale = std::max(scale, std::fabs(v));
  return all_close(cuda_result.to(Device::cpu()), cpu_result, rtol, rtol * scale);
}

bool missing_device(Device device) {
  if (!device.is_cuda() || cuda::is_available()) return false;
  EXPECT_FALSE(cuda_expected()) << "an NVIDIA GPU is on this machine but this build sees none";
  return true;
}

::testing::AssertionResult within_bound(const Tensor& actual, const Tensor& expected, const Tensor& bound) {
  if (actual.sizes() != expected.sizes() || bound.sizes() != expected.sizes())
    return ::testing::AssertionFailure() << "shapes " << str(actual.sizes()) << ", " << str(expected.sizes())
                                         << " and bound " << str(bound.sizes()) << " differ";
  const std::vector<double> a = actual.to_vector<double>(), e = expected.to_vector<double>(),
                            b = bound.to_vector<double>();
  int64_t bad = 0;
  std::ostringstream first;
  for (size_t i = 0; i < e.size(); ++i) {
    bool ok;
    if (std::isnan(e[i])) ok = std::isnan(a[i]);
    else if (std::isinf(e[i])) ok = a[i] == e[i];
    else ok = std::isfinite(a[i]) && std::fabs(a[i] - e[i]) <= b[i];
    if (ok) continue;
    if (bad++ < 5)
      first << "\n  flat index " << i << ": " << a[i] << " vs " << e[i] << " (|diff| "
            << std::fabs(a[i] - e[i]) << " > bound " << b[i] << ")";
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << e.size() << " elements outside their bound:" << first.str();
}

::testing::AssertionResult close_to_cpu_within(const Tensor& cuda_result, const Tensor& cpu_result,
                                               const Tensor& bound) {
  if (!cuda_result.device().is_cuda())
    return ::testing::AssertionFailure() << "the CUDA result lives on " << cuda_result.device().str();
  if (cuda_result.dtype() != cpu_result.dtype())
    return ::testing::AssertionFailure() << dtype_name(cuda_result.dtype()) << " vs " << dtype_name(cpu_result.dtype());
  return within_bound(cuda_result.to(Device::cpu()), cpu_result, bound);
}

}  // namespace ember::test

namespace ember::test {
double result_number(const std::string& output, const std::string& key) {
  const size_t at = output.rfind("result: {");
  if (at == std::string::npos) return NAN;
  const size_t k = output.find("\"" + key + "\": ", at);
  if (k == std::string::npos) return NAN;
  return std::strtod(output.c_str() + k + key.size() + 4, nullptr);
}

ProcessResult run_command(const std::string& command) {
  ProcessResult r;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return r;
  char buf[4096];
  while (size_t got = std::fread(buf, 1, sizeof buf, pipe)) r.output.append(buf, got);
  const int raw = ::pclose(pipe);
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
  return r;
}

namespace {
void write_be32(std::ofstream& f, uint32_t v) {
  const unsigned char b[4] = {uint8_t(v >> 24), uint8_t(v >> 16), uint8_t(v >> 8), uint8_t(v)};
  f.write(reinterpret_cast<const char*>(b), 4);
}
}  // namespace

DrawImage square_per_class(int noise, int side, int corner) {
  return [=](std::mt19937& rng, std::vector<uint8_t>& px) {
    const int label = int(rng() % 10);
    for (auto& p : px) p = uint8_t(rng() % unsigned(noise));
    const int at = corner + 2 * label;
    for (int r = 0; r < side; ++r)
      for (int c = 0; c < side; ++c) px[size_t((at + r) * 28 + at + c)] = 255;
    return label;
  };
}

void write_mnist_split(const std::filesystem::path& dir, const std::string& prefix, int n, uint32_t seed,
                       const DrawImage& draw) {
  std::mt19937 rng(seed);
  std::ofstream images(dir / (prefix + "-images-idx3-ubyte"), std::ios::binary);
  std::ofstream labels(dir / (prefix + "-labels-idx1-ubyte"), std::ios::binary);
  for (uint32_t v : {2051u, uint32_t(n), 28u, 28u}) write_be32(images, v);  // magic, count, rows, cols
  for (uint32_t v : {2049u, uint32_t(n)}) write_be32(labels, v);
  std::vector<uint8_t> px(784);
  for (int i = 0; i < n; ++i) {
    const int label = draw(rng, px);
    images.write(reinterpret_cast<const char*>(px.data()), 784);
    labels.put(char(label));
  }
}
}  // namespace ember::test

// ---- ONNX Runtime (tests/support/onnx_runtime.h) ----

namespace ember::test {
namespace {

namespace fs = std::filesystem;

// The repository's root: the folder above tests/ (EMBER_TEST_DATA_DIR is tests/fixtures).
fs::path repo_root() { return fs::path(EMBER_TEST_DATA_DIR).parent_path().parent_path(); }

fs::path onnxruntime_modules() {
  const char* env = std::getenv("EMBER_DATA_DIR");
  const fs::path data = env && *env ? fs::path(env) : repo_root() / "data";
  return data / "onnxruntime" / "node_modules";
}

const char* ort_dtype(DType t) {
  switch (t) {
    case DType::f32: return "float32";
    case DType::f64: return "float64";
    case DType::i64: return "int64";
    case DType::i32: return "int32";
    case DType::u8: return "uint8";
    case DType::b8: return "bool";
    default: throw std::runtime_error("run_onnxruntime: no ONNX Runtime dtype for " + std::string(dtype_name(t)));
  }
}
DType from_ort_dtype(const std::string& s) {
  if (s == "float32") return DType::f32;
  if (s == "float64") return DType::f64;
  if (s == "int64") return DType::i64;
  if (s == "int32") return DType::i32;
  if (s == "uint8") return DType::u8;
  if (s == "bool") return DType::b8;
  throw std::runtime_error("run_onnxruntime: unexpected output dtype " + s);
}

}  // namespace

std::string onnxruntime_missing() {
  if (run_command("node --version").status != 0) return "node is not installed (Debian: nodejs)";
  if (!fs::exists(onnxruntime_modules() / "onnxruntime-node" / "package.json"))
    return "onnxruntime-node is missing: run bash scripts/fetch_data.sh onnxruntime";
  return {};
}

int run_node_script(const std::string& script, const std::string& args, std::string& output) {
  ProcessResult r =
      run_command("NODE_PATH='" + onnxruntime_modules().string() + "' node '" + (repo_root() / script).string() + "' " + args);
  output = std::move(r.output);
  return r.status;
}

OnnxRun run_onnxruntime(const std::string& model, const std::vector<std::pair<std::string, Tensor>>& inputs) {
  const fs::path dir = fs::temp_directory_path() /
                       ("ember-ort-" + std::to_string(::getpid()) + "-" + std::to_string(std::rand()));
  fs::create_directories(dir);
  nlohmann::json specs = nlohmann::json::array();
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor t = inputs[i].second.cpu().contiguous();
    const std::string file = "input_" + std::to_string(i) + ".bin";
    std::ofstream(dir / file, std::ios::binary)
        .write(static_cast<const char*>(t.data_ptr()), std::streamsize(t.numel() * int64_t(t.element_size())));
    specs.push_back({{"name", inputs[i].first}, {"dtype", ort_dtype(t.dtype())},
                     {"shape", std::vector<int64_t>(t.sizes().begin(), t.sizes().end())}, {"file", file}});
  }
  std::ofstream(dir / "inputs.json") << specs.dump();
  std::string log;
  if (run_node_script("tests/support/onnx_run.js", "'" + model + "' '" + dir.string() + "'", log) != 0) {
    fs::remove_all(dir);
    throw std::runtime_error("ONNX Runtime failed: " + log);
  }
  std::ifstream in(dir / "outputs.json");
  const nlohmann::json result = nlohmann::json::parse(in);
  OnnxRun run;
  for (const auto& name : result["inputs"]) run.input_names.push_back(name.get<std::string>());
  for (const auto& o : result["outputs"]) {
    run.output_names.push_back(o["name"].get<std::string>());
    Shape shape(o["shape"].get<std::vector<int64_t>>());
    Tensor t = empty(shape, from_ort_dtype(o["dtype"].get<std::string>()));
    std::ifstream(dir / o["file"].get<std::string>(), std::ios::binary)
        .read(static_cast<char*>(t.data_ptr()), std::streamsize(t.numel() * int64_t(t.element_size())));
    run.outputs.push_back(t);
  }
  fs::remove_all(dir);
  return run;
}

}  // namespace ember::test

namespace ember::test {

CpuConvAlgorithm::CpuConvAlgorithm(const std::string& name)
    : winograd_(ops::conv_winograd()), onednn_(ops::conv_onednn()), autotune_(ops::conv_autotune()) {
  EMBER_CHECK(name == "im2col" || name == "winograd" || name == "onednn" || name == "auto", ValueError,
              "[CpuConvAlgorithm] unknown algorithm ", name);
  ops::set_conv_winograd(name == "winograd" || name == "auto");
  ops::set_conv_onednn(name == "onednn" || name == "auto");
  ops::set_conv_autotune(name == "auto");
}

CpuConvAlgorithm::~CpuConvAlgorithm() {
  ops::set_conv_winograd(winograd_);
  ops::set_conv_onednn(onednn_);
  ops::set_conv_autotune(autotune_);
}

}  // namespace ember::test
