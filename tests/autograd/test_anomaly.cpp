// autograd::detect_anomaly: a NaN/inf gradient produced in backward raises AutogradError
// naming the op, the input and the forward's call site (the function that called the op);
// finite graphs give bit-identical gradients with the guard on; the guard nests, restores the
// previous mode, is per thread, and is off by default.
#include <cmath>
#include <cstring>
#include <thread>

#include "ember/autograd/anomaly.h"
#include "support/test_support.h"

using namespace ember;
using autograd::detect_anomaly;
using test::message_of;

namespace {
Tensor leaf(std::vector<double> v) {
  Shape s{int64_t(v.size())};
  return tensor(v, s).requires_grad_();
}

// Where the faulty op is called: the trace must name this function.
[[gnu::noinline]] Tensor anomaly_model_with_sqrt(const Tensor& x) { return sum(sqrt(x) * 2.0); }
}  // namespace

TEST(Anomaly, OffByDefaultAndPerThread) {
  EXPECT_FALSE(autograd::is_anomaly_enabled());
  detect_anomaly on;
  EXPECT_TRUE(autograd::is_anomaly_enabled());
  bool other = true;
  std::thread([&] { other = autograd::is_anomaly_enabled(); }).join();
  EXPECT_FALSE(other);
}

TEST(Anomaly, GuardNestsAndRestores) {
  {
    detect_anomaly on;
    EXPECT_TRUE(autograd::is_anomaly_enabled());
    {
      detect_anomaly off(false);
      EXPECT_FALSE(autograd::is_anomaly_enabled());
      {
        detect_anomaly on_again;
        EXPECT_TRUE(autograd::is_anomaly_enabled());
      }
      EXPECT_FALSE(autograd::is_anomaly_enabled());
    }
    EXPECT_TRUE(autograd::is_anomaly_enabled());
  }
  EXPECT_FALSE(autograd::is_anomaly_enabled());
}

TEST(Anomaly, ForwardSiteRecordedOnlyUnderGuard) {
  Tensor x = leaf({1, 2});
  Tensor off = x * 2.0;
  EXPECT_EQ(off.grad_fn()->forward_site, nullptr);
  detect_anomaly on;
  Tensor y = x * 2.0;
  ASSERT_NE(y.grad_fn()->forward_site, nullptr);
  EXPECT_GT(y.grad_fn()->forward_site->count, 2);
}

TEST(Anomaly, SqrtAtZeroNamesOpAndCaller) {
  Tensor x = leaf({4.0, 0.0, 1.0});
  detect_anomaly on;
  Tensor loss = anomaly_model_with_sqrt(x);
  const std::string msg = message_of<AutogradError>([&] { loss.backward(); });
  EXPECT_NE(msg.find("[detect_anomaly]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'sqrt'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("input 0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("0 NaN and 1 inf of 3"), std::string::npos) << msg;
  EXPECT_NE(msg.find("anomaly_model_with_sqrt"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Anomaly_SqrtAtZeroNamesOpAndCaller_Test::TestBody"), std::string::npos) << msg;
  // The recording machinery is left out of the trace.
  EXPECT_EQ(msg.find("ember::autograd::detail::"), std::string::npos) << msg;
}

TEST(Anomaly, LogOfZero) {
  Tensor x = leaf({0.0, 2.0});
  detect_anomaly on;
  Tensor loss = sum(log(x));
  const std::string msg = message_of<AutogradError>([&] { loss.backward(); });
  EXPECT_NE(msg.find("'log'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("1 inf"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Anomaly_LogOfZero_Test::TestBody"), std::string::npos) << msg;
}

// 0/0 in a custom graph: d(a/b)/da = 1/b = inf at b = 0, and d(a/b)/db = -a/b^2 = NaN at
// a = b = 0; the first non-finite gradient reported is div's input 0.
TEST(Anomaly, ZeroOverZeroInDiv) {
  Tensor a = leaf({0.0, 1.0});
  Tensor b = leaf({0.0, 2.0});
  detect_anomaly on;
  Tensor loss = sum(div(a * 3.0, b + 0.0));
  const std::string msg = message_of<AutogradError>([&] { loss.backward(); });
  EXPECT_NE(msg.find("'div'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("input 0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Anomaly_ZeroOverZeroInDiv_Test::TestBody"), std::string::npos) << msg;
}

// A NaN (0 * inf) rather than an inf: sqrt's backward gets a zero gradient at x = 0.
TEST(Anomaly, NanFromZeroTimesInf) {
  Tensor x = leaf({0.0, 1.0});
  detect_anomaly on;
  Tensor loss = sum(sqrt(x) * 0.0);
  const std::string msg = message_of<AutogradError>([&] { loss.backward(); });
  EXPECT_NE(msg.find("'sqrt'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("1 NaN and 0 inf of 2"), std::string::npos) << msg;
}

TEST(Anomaly, WithoutGuardNoErrorAndTheInfPropagates) {
  Tensor x = leaf({0.0, 1.0});
  Tensor loss = sum(sqrt(x));
  EXPECT_NO_THROW(loss.backward());
  EXPECT_TRUE(std::isinf(x.grad().to_vector<double>()[0]));
}

TEST(Anomaly, NodeRecordedOutsideGuardStillChecked) {
  Tensor x = leaf({0.0, 1.0});
  Tensor loss = sum(sqrt(x));
  detect_anomaly on;
  const std::string msg = message_of<AutogradError>([&] { loss.backward(); });
  EXPECT_NE(msg.find("'sqrt'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("call site is unknown"), std::string::npos) << msg;
}

TEST(Anomaly, FiniteGraphSameGradientsWithAndWithoutGuard) {
  auto run = [](bool anomaly) {
    manual_seed(7);
    Tensor w = randn({4, 3}, DType::f32).requires_grad_();
    Tensor x = randn({5, 4}, DType::f32);
    detect_anomaly guard(anomaly);
    Tensor loss = sum(tanh(matmul(x, w)) * sqrt(w.sum() * w.sum() + 1.0));
    loss.backward();
    return w.grad().to_vector<float>();
  };
  const auto off = run(false);
  const auto on = run(true);
  ASSERT_EQ(off.size(), on.size());
  for (size_t i = 0; i < off.size(); ++i) {
    EXPECT_TRUE(std::isfinite(off[i]));
    EXPECT_EQ(std::memcmp(&off[i], &on[i], sizeof(float)), 0) << i;
  }
}
