// demo_mlp: a two-layer MLP trained with hand-written SGD on ember's autograd engine.
//
// The data is synthetic and needs no download: points x ~ N(0, 1) in `features` dimensions,
// labelled by a fixed random "teacher" network, so a student MLP can learn the labels well.
// This is the smallest complete training loop (forward, loss, backward, update) and the
// program the README's first command runs. Copy it as a starting point; the nn/optim
// modules will replace the hand-written parameters and update later.
//
//   build/bin/demo_mlp                  # defaults below
//   build/bin/demo_mlp --steps 500 --lr 0.2 --device cuda
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <ember/ember.h>
#include "common/cli_checks.h"

using namespace ember;

int main(int argc, char** argv) {
  int64_t samples = 8192, features = 16, hidden = 128, classes = 4;
  int64_t steps = 1000, batch_size = 128, log_every = 100;
  double lr = 0.2;
  uint64_t seed = 0;
  std::string device_name = "cpu";

  CLI::App app{"ember demo: a 2-layer MLP on synthetic data, trained with hand-written SGD"};
  namespace ex = ember::examples;
  app.add_option("--steps", steps, "training steps")->check(ex::WholeNumberIn(1, ex::kMaxCount));
  app.add_option("--batch-size", batch_size, "samples per step (at most --samples)")
      ->check(ex::WholeNumberIn(1, int64_t(1) << 26));
  app.add_option("--lr", lr, "SGD learning rate")->check(ex::FinitePositiveNumber);
  app.add_option("--hidden", hidden, "hidden units")->check(ex::WholeNumberIn(1, 1 << 16));
  app.add_option("--samples", samples, "size of the synthetic data set")->check(ex::WholeNumberIn(1, int64_t(1) << 26));
  app.add_option("--log-every", log_every, "print the loss every N steps")->check(ex::WholeNumberIn(1, ex::kMaxCount));
  app.add_option("--seed", seed, "random seed")->check(ex::Seed);
  app.add_option("--device", device_name, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  if (const std::optional<int> rc = ex::parse_flags("demo_mlp", app, argc, argv)) return *rc;
  // A batch larger than the data set would leave 0 batches per pass (once a division by zero: SIGFPE).
  if (batch_size > samples) {
    std::fprintf(stderr, "demo_mlp: --batch-size %lld must be at most --samples %lld\n", (long long)batch_size,
                 (long long)samples);
    return 2;
  }

  return ex::exit_code_of("demo_mlp", [&] {
    const Device dev = device_name == "cuda" ? Device::cuda(0) : Device::cpu();
    manual_seed(seed);

    // ---- data: labels from a fixed random teacher network ----
    Tensor x_all = randn({samples, features}, dev);
    Tensor teacher1 = randn({features, 16}, dev), teacher2 = randn({16, classes}, dev);
    Tensor y_all = x_all.matmul(teacher1).relu().matmul(teacher2).argmax(1);  // i64 [samples]

    // ---- model: parameters are plain leaf tensors that require grad ----
    // Scaled normal init (Kaiming-like) so the activations start at unit scale.
    auto param = [&](Shape shape, double scale) {
      return (randn(shape, dev) * scale).requires_grad_();
    };
    Tensor w1 = param({features, hidden}, std::sqrt(2.0 / double(features)));
    Tensor b1 = zeros({hidden}, dev).requires_grad_();
    Tensor w2 = param({hidden, classes}, std::sqrt(1.0 / double(hidden)));
    Tensor b2 = zeros({classes}, dev).requires_grad_();
    std::vector<Tensor> params{w1, b1, w2, b2};
    auto forward = [&](const Tensor& x) { return relu(x.matmul(w1) + b1).matmul(w2) + b2; };

    std::printf("demo_mlp: %lld samples, %lld -> %lld -> %lld MLP, batch %lld, lr %g, %s\n",
                (long long)samples, (long long)features, (long long)hidden, (long long)classes,
                (long long)batch_size, lr, device_name.c_str());

    // ---- training loop ----
    double first_loss = 0, last_loss = 0;
    const int64_t batches = samples / batch_size;
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t step = 0; step < steps; ++step) {
      const int64_t start = (step % batches) * batch_size;
      Tensor x = x_all.narrow(0, start, batch_size);
      Tensor y = y_all.narrow(0, start, batch_size);

      Tensor loss = cross_entropy(forward(x), y);
      loss.backward();

      {  // SGD: p -= lr * dp, outside the graph; then drop the gradients for the next step.
        NoGradGuard no_grad;
        for (Tensor& p : params) {
          p.sub_(p.grad(), lr);
          p.set_grad(Tensor());
        }
      }

      const double value = loss.item<double>();
      if (step == 0) first_loss = value;
      last_loss = value;
      if (step % log_every == 0 || step == steps - 1)
        std::printf("step %5lld  loss %.4f\n", (long long)step, value);
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    // ---- evaluation on the whole set ----
    double accuracy;
    {
      NoGradGuard no_grad;
      Tensor pred = forward(x_all).argmax(1);
      accuracy = pred.eq(y_all).to(DType::f32).mean().item<double>();
    }
    std::printf("throughput: %.0f samples/s (%lld steps in %.2f s)\n",
                double(steps * batch_size) / seconds, (long long)steps, seconds);
    std::printf("accuracy: %.1f%% on the %lld training samples\n", 100 * accuracy,
                (long long)samples);
    std::printf("final: loss %.4f -> %.4f\n", first_loss, last_loss);
    if (!(last_loss < first_loss)) {
      std::fprintf(stderr, "demo_mlp: the loss did not fall\n");
      return 1;
    }
    return 0;
  });
}
