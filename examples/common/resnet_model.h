// The ResNet of examples/resnet.cpp, shared with bench/bench_resnet.cpp so the benchmark times
// exactly the network the example trains (its PyTorch twin: bench/peers/resnet_peer.py).
//
// Model: stem conv3x3(1->16)-BN-ReLU at 28x28; three stages of two BasicBlocks with 16, 32, 64
// channels (the first block of stages 2 and 3 halves the resolution with a stride-2 conv and
// a 1x1 conv + BN shortcut): 28x28 -> 14x14 -> 7x7; global average pool; Linear(64, 10).
// Convolutions have no bias (BatchNorm's shift replaces it), as in torchvision.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ember/ember.h>

namespace ember::examples {

inline nn::Conv2dOptions resnet_conv_opts(int64_t stride, int64_t padding) {
  return {.stride = stride, .padding = padding, .bias = false};
}

// torchvision's BasicBlock: relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)).
struct BasicBlock : nn::Module {
  nn::Conv2d conv1, conv2;
  nn::BatchNorm2d bn1, bn2;
  std::shared_ptr<nn::Conv2d> down_conv;  // projection shortcut when the shape changes
  std::shared_ptr<nn::BatchNorm2d> down_bn;

  BasicBlock(int64_t in, int64_t out, int64_t stride)
      : conv1(in, out, 3, resnet_conv_opts(stride, 1)),
        conv2(out, out, 3, resnet_conv_opts(1, 1)),
        bn1(out),
        bn2(out) {
    register_module("conv1", conv1);
    register_module("bn1", bn1);
    register_module("conv2", conv2);
    register_module("bn2", bn2);
    if (stride != 1 || in != out) {
      down_conv = register_module("downsample_conv",
                                  std::make_shared<nn::Conv2d>(in, out, 1, resnet_conv_opts(stride, 0)));
      down_bn = register_module("downsample_bn", std::make_shared<nn::BatchNorm2d>(out));
    }
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = relu(bn1(conv1(x)));
    h = bn2(conv2(h));
    const Tensor shortcut = down_conv ? (*down_bn)((*down_conv)(x)) : x;
    return relu(h + shortcut);
  }
};

struct ResNet : nn::Module {
  nn::Conv2d stem{1, 16, 3, resnet_conv_opts(1, 1)};
  nn::BatchNorm2d stem_bn{16};
  std::vector<std::shared_ptr<BasicBlock>> blocks;
  nn::AdaptiveAvgPool2d pool{1};
  nn::Linear fc{64, 10};

  ResNet() {
    register_module("stem", stem);
    register_module("stem_bn", stem_bn);
    int64_t in = 16;
    const int64_t widths[3] = {16, 32, 64};
    for (int s = 0; s < 3; ++s)
      for (int b = 0; b < 2; ++b) {
        const int64_t stride = (s > 0 && b == 0) ? 2 : 1;
        blocks.push_back(register_module("layer" + std::to_string(s + 1) + "_" + std::to_string(b),
                                         std::make_shared<BasicBlock>(in, widths[s], stride)));
        in = widths[s];
      }
    register_module("pool", pool);
    register_module("fc", fc);
    // He init for the convolutions (torchvision's ResNet does the same).
    for (auto& [name, p] : named_parameters())
      if (p.dim() == 4) nn::init::kaiming_normal_(p, 0.0, nn::init::FanMode::fan_out, nn::init::Nonlinearity::relu);
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = relu(stem_bn(stem(x)));
    for (auto& b : blocks) h = b->forward(h);
    return fc(pool(h).flatten(1));
  }
};

}  // namespace ember::examples
