// Shared test helpers: device parametrization (one test body per device, candle-style),
// tolerant comparisons, and reading fixture files produced by tests/fixtures/make_fixtures.py.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <ember/ember.h>

namespace ember::test {

// Devices to run a test body on: the CPU always, CUDA when a device is visible.
std::vector<Device> test_devices();
std::string device_label(const ::testing::TestParamInfo<Device>& info);

// Element-wise |a - b| <= atol + rtol * |b| over tensors of equal shape (any dtype/device);
// on failure, the message names the first mismatching index and both values.
::testing::AssertionResult all_close(const Tensor& actual, const Tensor& expected,
                                     double rtol = 1e-5, double atol = 1e-6);
::testing::AssertionResult all_close(const Tensor& actual, const std::vector<double>& expected,
                                     double rtol = 1e-5, double atol = 1e-6);

// A named array from a fixture file: lines "name shape... : values...".
struct Fixture {
  Shape shape;
  std::vector<double> values;
  Tensor tensor(DType dtype = DType::f64) const;
};
Fixture load_fixture(const std::string& file, const std::string& name);

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

// Skips the current test when no CUDA device is present.
#define EMBER_SKIP_IF_NO_DEVICE(device)                                   \
  do {                                                                    \
    if ((device).is_cuda() && !::ember::cuda::is_available())             \
      GTEST_SKIP() << "no CUDA device";                                   \
  } while (0)

}  // namespace ember::test
