// End-to-end: a 2-layer MLP on synthetic data, trained by hand-written SGD on the autograd
// engine (the same loop as examples/demo_mlp.cpp), must learn the labels of a random teacher
// network. The bounds are stated, not relative: the untrained loss is above 1.0 (chance for
// 4 classes is ln 4 = 1.39), and 1000 steps must bring the full-data loss below 0.25 and the
// accuracy above 90% (a NumPy replica of this loop reaches 0.06-0.09 and 97-99% over six
// seeds); a broken forward, backward or update cannot pass both.
#include <cmath>

#include "support/test_support.h"

using namespace ember;

namespace {

struct Mlp {
  Tensor w1, b1, w2, b2;
  Tensor forward(const Tensor& x) const { return relu(x.matmul(w1) + b1).matmul(w2) + b2; }
  std::vector<Tensor> params() const { return {w1, b1, w2, b2}; }
};

}  // namespace

TEST(Integration, MlpTrainedBySgdLearnsTeacherLabels) {
  constexpr int64_t n = 2048, d = 16, h = 64, c = 4, batch = 64, steps = 1000;
  constexpr double lr = 0.3;
  manual_seed(1234);
  Tensor x_all = randn({n, d});
  Tensor y_all = x_all.matmul(randn({d, 16})).relu().matmul(randn({16, c})).argmax(1);
  ASSERT_EQ(y_all.dtype(), DType::i64);
  ASSERT_EQ(y_all.sizes(), Shape{n});

  Mlp net{(randn({d, h}) * std::sqrt(2.0 / d)).requires_grad_(), zeros({h}).requires_grad_(),
          (randn({h, c}) * std::sqrt(1.0 / h)).requires_grad_(), zeros({c}).requires_grad_()};

  const double initial = cross_entropy(net.forward(x_all), y_all).item<double>();
  EXPECT_GT(initial, 1.0);  // an untrained classifier: near or above ln(4) = 1.39

  for (int64_t step = 0; step < steps; ++step) {
    const int64_t start = (step * batch) % n;
    Tensor loss = cross_entropy(net.forward(x_all.narrow(0, start, batch)),
                                y_all.narrow(0, start, batch));
    loss.backward();
    NoGradGuard no_grad;
    for (Tensor p : net.params()) {
      ASSERT_TRUE(p.grad().defined());
      p.sub_(p.grad(), lr);
      p.set_grad(Tensor());
    }
  }

  NoGradGuard no_grad;
  Tensor logits = net.forward(x_all);
  const double final_loss = cross_entropy(logits, y_all).item<double>();
  const double accuracy = logits.argmax(1).eq(y_all).to(DType::f64).mean().item<double>();
  EXPECT_LT(final_loss, 0.25) << "initial loss " << initial;
  EXPECT_GT(accuracy, 0.90);
}
