// Shared test helpers: device parametrization (one test body per device, candle-style),
// tolerant comparisons, and reading fixture files produced by tests/fixtures/make_fixtures.py.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <ember/ember.h>

namespace ember::test {

// Devices to run a test body on: the CPU and CUDA (whose cases skip without a device). Use it
// for a body that checks every device against an independent reference (f64 loops, hand
// values, brute force).
std::vector<Device> test_devices();
// CUDA only: for a body whose reference is the CPU path itself ("CUDA matches the CPU").
// Instantiated for the CPU such a body would compare the CPU with itself and pass without
// testing anything, so it is not; without a GPU its cases skip.
std::vector<Device> cuda_devices();
std::string device_label(const ::testing::TestParamInfo<Device>& info);

// Element-wise |a - b| <= atol + rtol * |b| over tensors of equal shape (any dtype/device);
// on failure, the message names the first mismatching index and both values.
::testing::AssertionResult all_close(const Tensor& actual, const Tensor& expected,
                                     double rtol = 1e-5, double atol = 1e-6);
// The list form is for 1-d results (0-d with a single value); any other shape fails.
::testing::AssertionResult all_close(const Tensor& actual, const std::vector<double>& expected,
                                     double rtol = 1e-5, double atol = 1e-6);
// Row-major values of a result whose shape must be `expected_shape` (state the shape the op
// must produce, never the actual's own sizes()).
::testing::AssertionResult all_close(const Tensor& actual, const Shape& expected_shape,
                                     const std::vector<double>& expected, double rtol = 1e-5,
                                     double atol = 1e-6);

// CUDA against the CPU path, for the fused nn kernels (softmax, cross-entropy, layer norm)
// run on both devices from the same (rounded) inputs: the relative tolerance of a result of
// dtype dt, f64 1e-12; f32 1e-5 (same compute type, different summation order); f16 2e-3 and
// bf16 1.6e-2 (both compute in f32 and round once: about one unit of the last place).
double cuda_rtol(DType dt);
// cuda_result (on a CUDA device) against cpu_result, of the same dtype and shape: all_close
// with rtol and an absolute floor of rtol times the largest finite |cpu_result| value. Two
// undefined tensors agree; one undefined does not.
::testing::AssertionResult close_to_cpu(const Tensor& cuda_result, const Tensor& cpu_result,
                                        double rtol);
// Elementwise: |actual - expected| <= bound (an f64 tensor of their shape on the CPU), NaN
// exactly where expected is NaN, infinities equal; any devices. For results whose magnitudes
// span many orders (scans, products), where close_to_cpu's floor from the largest value would
// leave the small elements unchecked (issue 40, item 5); the first few violations are listed.
::testing::AssertionResult within_bound(const Tensor& actual, const Tensor& expected, const Tensor& bound);
// within_bound for a CUDA result against its CPU twin (same dtype and shape).
::testing::AssertionResult close_to_cpu_within(const Tensor& cuda_result, const Tensor& cpu_result,
                                               const Tensor& bound);

// A named array from a fixture file: lines "name shape... : values...".
struct Fixture {
  Shape shape;
  std::vector<double> values;
  Tensor tensor(DType dtype = DType::f64) const;
};
Fixture load_fixture(const std::string& file, const std::string& name);

// The number under `key` in the `result: {json}` line of a program's output (NaN if none).
double result_number(const std::string& output, const std::string& key);

// A finished program: its exit status (128 + the signal when one ended it, -1 when it could not
// start) and everything it printed, stderr joined to stdout.
struct ProcessResult {
  int status = -1;
  std::string output;
};
// Runs `command` through the shell (`command 2>&1`) and waits for it.
ProcessResult run_command(const std::string& command);

// One split of an MNIST-format data set for the example tests: <prefix>-images-idx3-ubyte and
// <prefix>-labels-idx1-ubyte in `dir`, n images of 28x28. draw(rng, pixels) fills one image's 784
// pixels and returns its label; every image draws from the one generator, seeded with `seed`.
using DrawImage = std::function<int(std::mt19937& rng, std::vector<uint8_t>& pixels)>;
void write_mnist_split(const std::filesystem::path& dir, const std::string& prefix, int n, uint32_t seed,
                       const DrawImage& draw);
// Images whose label is visible: a uniform label, noise in [0, noise), and a side x side square
// of 255 with its corner at (corner + 2 * label, corner + 2 * label).
DrawImage square_per_class(int noise, int side, int corner);

// The message of the E that f() throws, or a description of what happened instead.
template <class E, class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong exception type: ") + e.what();
  }
  return "no exception";
}

// Whether this machine must run the CUDA tests: EMBER_REQUIRE_CUDA=1, or (unless
// EMBER_REQUIRE_CUDA=0 or CUDA_VISIBLE_DEVICES hides every device) an NVIDIA driver's device
// nodes exist. There a build that sees no device (one built without CUDA, which links the
// cuda_stub) is a failure, not a skip.
bool cuda_expected();

// The one place a CUDA test gives up: a skip (with its reason) on a machine without a GPU, a
// failure where a GPU is present but this build cannot see it. A missing CUDA kernel is never
// a reason to skip: with a device present it must fail.
#define EMBER_SKIP_WITHOUT_CUDA()                                                          \
  do {                                                                                     \
    if (!::ember::cuda::is_available()) {                                                  \
      if (::ember::test::cuda_expected())                                                  \
        FAIL() << "an NVIDIA GPU is on this machine but this build sees no CUDA device "   \
                  "(built without nvcc, so the cuda_stub was linked?)";                    \
      else                                                                                 \
        GTEST_SKIP() << "no CUDA device on this machine";                                  \
    }                                                                                      \
  } while (0)

// The same rule for one iteration of a loop over test_devices(), where a skip would hide the
// CPU half: true (go on to the next device) for a CUDA device this build cannot see, with a
// failure recorded where a GPU is expected.
bool missing_device(Device device);

// The same, for a test body parametrized by device: only a CUDA device can be missing.
#define EMBER_SKIP_IF_NO_DEVICE(device)                                   \
  do {                                                                    \
    if ((device).is_cuda()) EMBER_SKIP_WITHOUT_CUDA();                    \
  } while (0)

// Forces one CPU convolution algorithm for a scope (Note [CPU convolution algorithms],
// ops/cpu/conv.cpp) and puts the previous settings back: "im2col"; "winograd" (where the shape
// is eligible, else im2col); "onednn" (where this build's oneDNN has an optimized kernel for
// the pass, else im2col); "auto" (both allowed, the choice measured). Only "auto" measures.
class CpuConvAlgorithm {
 public:
  explicit CpuConvAlgorithm(const std::string& name);
  ~CpuConvAlgorithm();
  CpuConvAlgorithm(const CpuConvAlgorithm&) = delete;
  CpuConvAlgorithm& operator=(const CpuConvAlgorithm&) = delete;

 private:
  bool winograd_, onednn_, autotune_;
};

}  // namespace ember::test
