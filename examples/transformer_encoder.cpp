// transformer_encoder: a small Transformer encoder (nn::TransformerEncoder over
// nn::MultiheadAttention) trained on variable-length sequences where the padding mask is the
// only way to tell real tokens from padding. Generates its own data, needs no download.
//
//   build/bin/transformer_encoder                         # CPU, 600 steps
//   build/bin/transformer_encoder --device cuda --steps 2000 --d-model 128
//   build/bin/transformer_encoder --export-onnx encoder.onnx   # the trained model for ONNX Runtime
//
// The task: a sequence of 1..max_len digits (odd lengths, so no ties) is labelled 1 when more
// of its digits are >= 5 than < 5. Sequences are padded to max_len with RANDOM digits, not a
// pad token, so a model that ignored src_key_padding_mask would count the padding too: the
// final evaluation also runs the trained model without the mask to show that it matters.
//
// Model: token + learned position embeddings, `layers` pre-norm encoder layers (GELU,
// dropout), final LayerNorm, mean over the real tokens, Linear(d_model, 2). AdamW,
// cross-entropy. Prints the loss every --log-every steps, then held-out accuracy (with and
// without the mask), training tokens/s (padded positions included), and a `result: {json}`.
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <ember/ember.h>
#include "common/cli_checks.h"

using namespace ember;

namespace {

struct Config {
  int64_t steps = 600;
  int64_t batch_size = 64;
  int64_t max_len = 16;
  int64_t d_model = 64;
  int64_t heads = 4;
  int64_t layers = 2;
  int64_t ff = 128;
  double dropout = 0.1;
  double lr = 1e-3;
  int64_t eval_size = 2000;
  int64_t log_every = 100;
  uint64_t seed = 0;
  std::string device = "cpu";
  std::string export_onnx;
};

// A batch: tokens [B, T] (i64), key padding mask [B, T] (bool, true = padding), labels [B].
struct Batch {
  Tensor tokens, padding, labels;
};

Batch make_batch(std::mt19937_64& rng, int64_t B, int64_t T, Device dev) {
  std::vector<int64_t> tokens(static_cast<size_t>(B * T)), labels(static_cast<size_t>(B));
  std::vector<double> pad(size_t(B * T));
  std::uniform_int_distribution<int64_t> digit(0, 9), half_len(0, (T - 1) / 2);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t len = 2 * half_len(rng) + 1;  // odd, 1 .. T
    int64_t high = 0;
    for (int64_t t = 0; t < T; ++t) {
      const int64_t d = digit(rng);  // padding positions get random digits too
      tokens[size_t(b * T + t)] = d;
      pad[size_t(b * T + t)] = t >= len;
      if (t < len) high += d >= 5;
    }
    labels[size_t(b)] = 2 * high > len;
  }
  return {tensor<int64_t>(tokens, {B, T}).to(dev), tensor<double>(pad, {B, T}).gt(0.5).to(dev),
          tensor<int64_t>(labels, {B}).to(dev)};
}

struct Classifier : nn::Module {
  nn::Embedding tok, pos;
  nn::TransformerEncoder encoder;
  nn::Linear head;

  Classifier(const Config& c)
      : tok(10, c.d_model),
        pos(c.max_len, c.d_model),
        encoder(nn::TransformerEncoderLayer(c.d_model, c.heads,
                                            {.dim_feedforward = c.ff,
                                             .dropout = c.dropout,
                                             .activation = "gelu",
                                             .batch_first = true,
                                             .norm_first = true}),
                c.layers, std::make_shared<nn::LayerNorm>(Shape{c.d_model})),
        head(c.d_model, 2) {
    register_module("tok", tok);
    register_module("pos", pos);
    register_module("encoder", encoder);
    register_module("head", head);
  }

  // Logits [B, 2]; `use_mask` false shows what the model does when padding is not masked.
  Tensor forward(const Batch& x, bool use_mask = true) {
    const int64_t T = x.tokens.sizes()[1];
    const Tensor positions = arange(T, TensorOptions(DType::i64).device(x.tokens.device()));
    Tensor h = tok(x.tokens) + pos(positions);
    h = encoder(h, Tensor(), use_mask ? x.padding : Tensor());
    // Mean over the real tokens (all tokens without the mask).
    Tensor keep = use_mask ? where(x.padding, 0.0, ones({}, TensorOptions(h.dtype()).device(h.device())))
                           : ones(x.padding.sizes(), TensorOptions(h.dtype()).device(h.device()));
    keep = keep.unsqueeze(2);
    const Tensor pooled = (h * keep).sum({1}) / keep.sum({1});
    return head(pooled);
  }
};

double accuracy(Classifier& model, const std::vector<Batch>& data, bool use_mask) {
  NoGradGuard no_grad;
  int64_t right = 0, total = 0;
  for (const Batch& b : data) {
    const Tensor pred = argmax(model.forward(b, use_mask), 1);
    right += pred.eq(b.labels).sum().item<int64_t>();
    total += b.labels.numel();
  }
  return double(right) / double(total);
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  CLI::App app{"ember: a small Transformer encoder on padded variable-length digit sequences"};
  namespace ex = ember::examples;
  app.add_option("--steps", cfg.steps, "training steps")->check(ex::WholeNumberIn(1, ex::kMaxCount));
  app.add_option("--batch-size", cfg.batch_size, "sequences per step")->check(ex::WholeNumberIn(1, int64_t(1) << 20));
  app.add_option("--max-len", cfg.max_len, "padded sequence length")->check(ex::WholeNumberIn(1, 4096));
  app.add_option("--d-model", cfg.d_model, "model width")->check(ex::WholeNumberIn(1, 1 << 16));
  app.add_option("--heads", cfg.heads, "attention heads (must divide --d-model)")->check(ex::WholeNumberIn(1, 1 << 16));
  app.add_option("--layers", cfg.layers, "encoder layers")->check(ex::WholeNumberIn(1, 1024));
  app.add_option("--ff", cfg.ff, "feed-forward width")->check(ex::WholeNumberIn(1, 1 << 20));
  app.add_option("--dropout", cfg.dropout, "dropout (attention, residual, feed-forward)")
      ->check(ex::NumberIn(0.0, 0.99));
  app.add_option("--lr", cfg.lr, "AdamW learning rate")->check(ex::FinitePositiveNumber);
  app.add_option("--eval-size", cfg.eval_size, "held-out sequences")->check(ex::WholeNumberIn(1, int64_t(1) << 30));
  app.add_option("--log-every", cfg.log_every, "print the loss every N steps")
      ->check(ex::WholeNumberIn(1, ex::kMaxCount));
  app.add_option("--seed", cfg.seed, "seed for data, initialization and dropout")->check(ex::Seed);
  app.add_option("--export-onnx", cfg.export_onnx,
                 "after training, write the model as ONNX to FILE (tokens and padding mask -> logits)");
  app.add_option("--device", cfg.device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  if (const std::optional<int> rc = ex::parse_flags("transformer_encoder", app, argc, argv)) return *rc;
  if (cfg.d_model % cfg.heads != 0) {
    std::fprintf(stderr, "transformer_encoder: --heads %lld must divide --d-model %lld\n", (long long)cfg.heads,
                 (long long)cfg.d_model);
    return 2;
  }

  // ember's errors and any other: exit 1, one line (never std::terminate's SIGABRT).
  return ex::exit_code_of("transformer_encoder", [&] {
    const Device dev = cfg.device == "cuda" ? Device::cuda(0) : Device::cpu();
    manual_seed(cfg.seed);
    if (!cfg.export_onnx.empty()) examples::prepare_output_file("transformer_encoder", "--export-onnx", cfg.export_onnx);
    Classifier model(cfg);
    model.to(dev);
    optim::AdamW opt(model.parameters(), {.lr = cfg.lr, .weight_decay = 0.01});

    // Held-out data from its own stream, never seen in training.
    std::mt19937_64 train_rng(cfg.seed * 2 + 1), eval_rng(cfg.seed * 2 + 2);
    std::vector<Batch> eval;
    for (int64_t n = 0; n < cfg.eval_size; n += cfg.batch_size)
      eval.push_back(make_batch(eval_rng, std::min(cfg.batch_size, cfg.eval_size - n), cfg.max_len, dev));

    std::printf("transformer_encoder: %lld layers, d_model %lld, %lld heads, %lld parameters, %s\n",
                (long long)cfg.layers, (long long)cfg.d_model, (long long)cfg.heads,
                (long long)model.num_parameters(), cfg.device.c_str());
    double loss_sum = 0, last_loss = 0;
    int64_t loss_n = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t step = 1; step <= cfg.steps; ++step) {
      const Batch b = make_batch(train_rng, cfg.batch_size, cfg.max_len, dev);
      Tensor loss = cross_entropy(model.forward(b), b.labels);
      opt.zero_grad();
      loss.backward();
      opt.step();
      loss_sum += loss.item<double>();
      ++loss_n;
      if (step % cfg.log_every == 0 || step == cfg.steps) {
        last_loss = loss_sum / double(loss_n);
        std::printf("step %lld/%lld  train loss %.4f\n", (long long)step, (long long)cfg.steps, last_loss);
        std::fflush(stdout);
        loss_sum = 0;
        loss_n = 0;
      }
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double tokens_per_s = double(cfg.steps * cfg.batch_size * cfg.max_len) / seconds;
    model.eval();
    const double acc = accuracy(model, eval, true);
    const double acc_unmasked = accuracy(model, eval, false);
    std::printf("held-out accuracy %.2f%% (chance ~50%%; the same model without the padding mask: %.2f%%)\n",
                100 * acc, 100 * acc_unmasked);
    std::printf("training: %.0f tokens/s (%.1f s)\n", tokens_per_s, seconds);
    if (!cfg.export_onnx.empty()) {
      // An example shorter than max_len: the export traces again one token longer.
      std::mt19937_64 example_rng(cfg.seed);
      const Batch example = make_batch(example_rng, 2, std::max<int64_t>(1, cfg.max_len - 1), dev);
      io::export_onnx(
          model, [&](const TensorList& in) { return TensorList{model.forward({in[0], in[1], Tensor()})}; },
          {example.tokens, example.padding}, cfg.export_onnx,
          {.input_names = {"tokens", "padding"},
           .output_names = {"logits"},
           .dynamic_axes = {{"tokens", {{0, "batch"}, {1, "length"}}}, {"padding", {{0, "batch"}, {1, "length"}}}}});
      std::printf("exported %s (ONNX opset 17): tokens [batch, length <= %lld] int64, padding [batch, length] "
                  "bool (true = padding) -> logits [batch, 2]\n",
                  cfg.export_onnx.c_str(), (long long)cfg.max_len);
    }
    std::printf("result: {\"train_loss\": %.4f, \"test_accuracy\": %.4f, \"test_accuracy_without_mask\": %.4f, "
                "\"tokens_per_s\": %.0f, \"steps\": %lld, \"device\": \"%s\"}\n",
                last_loss, acc, acc_unmasked, tokens_per_s, (long long)cfg.steps, cfg.device.c_str());
    return 0;
  });
}
