// Consumer of an installed ember (tests/install): builds against the exported package only
// and checks a few values, so a broken install (missing header, library or dependency)
// fails to configure, build or run.
#include <cmath>
#include <cstdio>

#include <ember/ember.h>

// The README's module shape: layers as members, registered by name.
struct Net : ember::nn::Module {
  ember::nn::Linear fc1{4, 16}, fc2{16, 3};
  Net() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  ember::Tensor forward(const ember::Tensor& x) { return fc2(ember::nn::functional::relu(fc1(x))); }
};

int main() {
  using namespace ember;
  manual_seed(0);
  Tensor x = tensor<double>({1.0, 2.0, 3.0}, {3}).requires_grad_();
  Tensor y = x * x + x.exp();  // dy/dx = 2x + exp(x)
  y.backward(ones({3}, DType::f64));
  std::vector<double> g = x.grad().to_vector<double>();
  bool ok = g.size() == 3;
  for (int i = 0; ok && i < 3; ++i) {
    double xi = i + 1.0;
    ok = std::abs(g[i] - (2 * xi + std::exp(xi))) < 1e-9;
  }
  Tensor r = randn({2, 3});
  ok = ok && r.sizes() == Shape{2, 3} && r.dtype() == DType::f32;

  // nn + optim + data + io from the installed libraries: a few AdamW steps on a
  // TensorDataset must lower the loss, and a safetensors round trip must give the weights back.
  Tensor xs = randn({64, 4});
  Tensor ys = xs.matmul(randn({4, 3})).argmax(1);
  Net net;
  optim::AdamW opt(net.parameters(), {.lr = 1e-2});
  data::DataLoader loader(data::TensorDataset(xs, ys), {.batch_size = 16, .shuffle = true});
  double first = 0, last = 0;
  for (int epoch = 0; epoch < 20; ++epoch) {
    for (auto& [xb, yb] : loader) {
      Tensor loss = nn::functional::cross_entropy(net.forward(xb), yb);
      opt.zero_grad();
      loss.backward();
      opt.step();
      last = loss.item<double>();
      if (first == 0) first = last;
    }
  }
  const std::string path = "installed_net.safetensors";
  io::save_safetensors(net.state_dict(), path);
  StateDict back = io::load_safetensors(path);
  ok = ok && last < first && back.size() == 4 &&
       back.at("fc1.weight").sub(net.fc1.weight).abs().max().item<double>() == 0.0;
  std::printf("installed nn/optim/data/io: loss %.3f -> %.3f\n", first, last);
  std::printf("installed ember works: grad %s, CUDA runtime %s\n", ok ? "ok" : "WRONG",
              cuda::runtime_version().c_str());
  return ok ? 0 : 1;
}
