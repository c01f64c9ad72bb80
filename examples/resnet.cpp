// resnet: a small ResNet (He et al., the CIFAR-style "ResNet-20" shape with 2 blocks per stage)
// on Fashion-MNIST with SGD + Nesterov momentum and the 1cycle schedule. What a PyTorch user
// would write with torchvision's BasicBlock: Conv2d, BatchNorm2d, ReLU, 1x1 projection
// shortcuts, AdaptiveAvgPool2d(1) and a Linear head.
//
//   bash scripts/fetch_data.sh fashion-mnist         # data/fashion-mnist/ (Debian package)
//   build/bin/resnet                                 # 4 epochs on the CPU (2 reach 91%)
//   build/bin/resnet --device cuda --amp bf16 --epochs 10 --cudnn-benchmark
//   build/bin/resnet --limit 512 --epochs 2          # a quick smoke run on 512 images
//   build/bin/resnet --export-onnx resnet.onnx       # then run it in ONNX Runtime (README)
//
// On the CPU the batches go in as channels_last (--memory-format; Note [Memory format] in
// ember/tensor.h): the convolutions, batch norms and elementwise ops keep that NHWC layout,
// which oneDNN's convolution kernels read without reordering. On CUDA they stay NCHW, the
// layout ember's cuDNN convolutions take today.
//
// Per epoch it prints the mean training loss, images/s and the test loss and accuracy, and at
// the end one `result: {json}` line.
//
// Model (examples/common/resnet_model.h, shared with bench/bench_resnet.cpp): stem
// conv3x3(1->16)-BN-ReLU at 28x28; three stages of two BasicBlocks with 16, 32, 64 channels
// (stride-2 conv and a 1x1 conv + BN shortcut at the start of stages 2 and 3): 28x28 -> 14x14
// -> 7x7; global average pool; Linear(64, 10). Convolutions have no bias, as in torchvision.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <ember/amp.h>
#include <ember/ops/conv.h>
#include <ember/ember.h>

#include "common/cli_checks.h"
#include "common/resnet_model.h"

using namespace ember;

namespace {

using examples::ResNet;

struct Config {
  std::string data = "data/fashion-mnist", device = "cpu", amp = "off", export_onnx, memory_format = "channels_last";
  int64_t epochs = 4, batch_size = 128, limit = 0;
  int workers = 1;
  double lr = 0.1, weight_decay = 5e-4;
  uint64_t seed = 0;
  bool cudnn_benchmark = false;
};

struct Eval {
  double loss = 0, accuracy = 0;
};

// Mean loss and accuracy over the first n images of a split, in eval mode (running BN stats).
MemoryFormat memory_format_of(const std::string& name, Device dev) {
  return name == "channels_last" && dev.is_cpu() ? MemoryFormat::channels_last : MemoryFormat::contiguous;
}

Eval evaluate(ResNet& model, const data::Dataset& split, int64_t n, Device dev, bool use_amp, DType amp_dtype,
              MemoryFormat format) {
  NoGradGuard no_grad;
  model.eval();
  data::DataLoader loader(split, {.batch_size = 500,
                                  .sampler = [n](int64_t) {
                                    std::vector<int64_t> order(static_cast<size_t>(n));
                                    for (int64_t i = 0; i < n; ++i) order[size_t(i)] = i;
                                    return order;
                                  },
                                  .num_workers = 1});
  Tensor loss_sum = zeros({}, TensorOptions(DType::f64).device(dev));
  Tensor correct = zeros({}, TensorOptions(DType::i64).device(dev));
  for (auto& [x, y] : loader) {
    Tensor xd = x.to(dev, true).contiguous(format), yd = y.to(dev, true);
    Tensor logits;
    {
      amp::autocast ac(dev, amp_dtype, use_amp);
      logits = model.forward(xd);
    }
    loss_sum += cross_entropy(logits.to(DType::f32), yd, {.reduction = Reduction::sum}).to(DType::f64);
    correct += logits.argmax(1).eq(yd).sum();
  }
  model.train();
  return {loss_sum.item<double>() / double(n), double(correct.item<int64_t>()) / double(n)};
}

int run(const Config& cfg) {
  const Device dev = cfg.device == "cuda" ? Device::cuda(0) : Device::cpu();
  ops::set_cudnn_benchmark(cfg.cudnn_benchmark);
  manual_seed(cfg.seed);
  if (!cfg.export_onnx.empty()) examples::prepare_output_file("resnet", "--export-onnx", cfg.export_onnx);
  data::FashionMNIST train_set(cfg.data, data::Split::train, {.normalize = true});
  data::FashionMNIST test_set(cfg.data, data::Split::test, {.normalize = true});
  const int64_t n_train = cfg.limit > 0 ? std::min(cfg.limit, train_set.size()) : train_set.size();
  const int64_t n_test = cfg.limit > 0 ? std::min(cfg.limit, test_set.size()) : test_set.size();
  const int64_t steps_per_epoch = (n_train + cfg.batch_size - 1) / cfg.batch_size;

  ResNet model;
  model.to(dev);
  optim::SGD opt(model.parameters(),
                 {.lr = cfg.lr, .momentum = 0.9, .weight_decay = cfg.weight_decay, .nesterov = true});
  // Once per batch; cycles the momentum between 0.85 and 0.95 against the lr.
  optim::OneCycleLR sched(opt, cfg.lr, {.epochs = cfg.epochs, .steps_per_epoch = steps_per_epoch});
  const bool use_amp = cfg.amp != "off";
  const DType amp_dtype = cfg.amp == "fp16" ? DType::f16 : DType::bf16;
  amp::GradScaler scaler({.enabled = cfg.amp == "fp16"});

  std::printf("resnet: %lld parameters on %s, %lld train / %lld test images, batch %lld, %lld epochs, "
              "SGD nesterov + OneCycleLR max_lr %g\n",
              (long long)model.num_parameters(), cfg.device.c_str(), (long long)n_train, (long long)n_test,
              (long long)cfg.batch_size, (long long)cfg.epochs, cfg.lr);
  Eval test{NAN, NAN};
  double first_loss = NAN, last_loss = NAN, images_per_s = 0;
  for (int64_t epoch = 0; epoch < cfg.epochs; ++epoch) {
    // The epoch's order: a permutation of the whole set, cut to --limit images.
    data::DataLoader loader(train_set, {.batch_size = cfg.batch_size,
                                        .sampler = [&](int64_t e) {
                                          auto order = data::permutation(train_set.size(), cfg.seed, e);
                                          order.resize(size_t(n_train));
                                          return order;
                                        },
                                        .num_workers = cfg.workers,
                                        .pin_memory = dev.is_cuda()});
    loader.set_epoch(epoch);
    Tensor loss_sum = zeros({}, TensorOptions(DType::f64).device(dev));
    const auto t0 = std::chrono::steady_clock::now();
    for (auto& [x, y] : loader) {
      Tensor xd = x.to(dev, true).contiguous(memory_format_of(cfg.memory_format, dev)), yd = y.to(dev, true);
      Tensor loss;
      {
        amp::autocast ac(dev, amp_dtype, use_amp);
        loss = cross_entropy(model.forward(xd), yd);
      }
      opt.zero_grad();
      scaler.scale(loss).backward();
      scaler.step(opt);
      scaler.update();
      sched.step();
      NoGradGuard no_grad;
      loss_sum += loss.detach().to(DType::f64) * double(x.size(0));
    }
    const double train_loss = loss_sum.item<double>() / double(n_train);  // the epoch's one sync
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    images_per_s = double(n_train) / seconds;
    if (epoch == 0) first_loss = train_loss;
    last_loss = train_loss;
    if (!std::isfinite(train_loss)) {
      std::fprintf(stderr, "resnet: the loss became %g in epoch %lld (try a lower --lr)\n", train_loss,
                   (long long)epoch + 1);
      return 3;
    }
    test = evaluate(model, test_set, n_test, dev, use_amp, amp_dtype, memory_format_of(cfg.memory_format, dev));
    std::printf("epoch %lld/%lld  train loss %.4f  %.1f images/s  test loss %.4f  test acc %.2f%%\n",
                (long long)epoch + 1, (long long)cfg.epochs, train_loss, images_per_s, test.loss,
                100.0 * test.accuracy);
    std::fflush(stdout);
  }
  if (!cfg.export_onnx.empty()) {
    // Raw pixels in [0, 1] in, normalized as in training; BatchNorm with its running statistics.
    const double mean = train_set.mean(), stddev = train_set.stddev();
    io::export_onnx(
        model, [&](const TensorList& in) { return TensorList{model.forward((in[0] - mean) / stddev)}; },
        {zeros({1, 1, 28, 28}, TensorOptions().device(dev))}, cfg.export_onnx,
        {.input_names = {"image"}, .output_names = {"logits"}, .dynamic_axes = {{"image", {{0, "batch"}}}}});
    std::printf("exported %s (ONNX opset 17): image [batch, 1, 28, 28] pixels in [0, 1] -> logits [batch, 10]\n",
                cfg.export_onnx.c_str());
  }
  std::printf("result: {\"first_train_loss\": %.6f, \"final_train_loss\": %.6f, \"test_loss\": %.6f, "
              "\"test_accuracy\": %.4f, \"images_per_s\": %.1f, \"epochs\": %lld}\n",
              first_loss, last_loss, test.loss, test.accuracy, images_per_s, (long long)cfg.epochs);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  CLI::App app{"ember: a small ResNet on Fashion-MNIST (SGD + OneCycleLR)"};
  app.add_option("--data", cfg.data, "folder with the four Fashion-MNIST IDX files (scripts/fetch_data.sh fashion-mnist)");
  namespace ex = ember::examples;
  app.add_option("--epochs", cfg.epochs, "passes over the training set")->check(ex::WholeNumberIn(1, 1000));
  app.add_option("--batch-size", cfg.batch_size, "images per step")->check(ex::WholeNumberIn(1, int64_t(1) << 20));
  app.add_option("--limit", cfg.limit, "use only the first N training and test images (0: all)")
      ->check(ex::WholeNumberIn(0, int64_t(1) << 30));
  app.add_option("--lr", cfg.lr, "OneCycleLR's max_lr")->check(ex::NumberIn(1e-8, 10.0));
  app.add_option("--weight-decay", cfg.weight_decay, "SGD L2 weight decay")->check(ex::NumberIn(0.0, 1.0));
  app.add_option("--device", cfg.device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--amp", cfg.amp, "autocast: off, bf16 or fp16 (fp16 adds a GradScaler)")
      ->check(CLI::IsMember({"off", "bf16", "fp16"}));
  app.add_option("--workers", cfg.workers, "data loader threads (0: load in the training thread)")
      ->check(ex::WholeNumberIn(0, 64));
  app.add_option("--seed", cfg.seed, "seed for initialization and shuffling")->check(ex::Seed);
  app.add_option("--export-onnx", cfg.export_onnx,
                 "after training, write the model as ONNX to FILE (image pixels in [0, 1] -> logits)");
  app.add_option("--memory-format", cfg.memory_format,
                 "the batches' layout on the CPU: channels_last or contiguous (NCHW)")
      ->check(CLI::IsMember({"channels_last", "contiguous"}));
  app.add_flag("--cudnn-benchmark", cfg.cudnn_benchmark,
               "CUDA: time cuDNN's algorithms at each convolution shape's first use and run the fastest "
               "(torch.backends.cudnn.benchmark)");
  if (const std::optional<int> rc = ex::parse_flags("resnet", app, argc, argv)) return *rc;
  return ex::exit_code_of("resnet", [&] { return run(cfg); });
}
