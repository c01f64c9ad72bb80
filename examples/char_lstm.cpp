// A character-level LSTM language model on the Brown corpus (bash scripts/fetch_data.sh brown):
// bytes -> Embedding(256, 64) -> LSTM(64, hidden, 2 layers) -> Linear(hidden, 256), trained
// with AdamW and gradient clipping by truncated backpropagation through time: the training
// text is cut into `batch` parallel streams, each step reads the next `seq-len` bytes of every
// stream and starts from the previous step's final LSTM state, detached (so gradients flow
// through seq-len steps only). It prints the training loss, the loss on a held-out split (the
// last 5% of the corpus) and tokens/s, and finally samples text.
//
// bench/peers/char_lstm_peer.py is the same program in PyTorch (same data order, sizes and
// hyperparameters), so the two loss curves can be compared step by step.
//
//   build/bin/char_lstm --steps 500                 # CPU
//   build/bin/char_lstm --steps 2000 --device cuda
//   build/bin/char_lstm --export-onnx char_lstm.onnx  # the trained model for ONNX Runtime
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <ember/ember.h>

#include "common/train_log.h"
#include "common/cli_checks.h"

using namespace ember;
using ember::examples::ResultLine;

namespace {

struct Config {
  std::string data = "data/brown", device = "cpu", export_onnx;
  int64_t steps = 500, hidden = 256, layers = 2, embed = 64, batch = 32, seq_len = 64;
  int64_t eval_every = 50, eval_batches = 4, sample = 300;
  double lr = 2e-3, weight_decay = 0.01, clip = 1.0;
  uint64_t seed = 1337;
};

// The corpus as bytes: every Brown file, POS tags stripped (ember::data::brown_untag), in
// name order.
std::string load_brown(const std::string& dir) {
  std::string text;
  for (const std::string& f : data::brown_files(dir)) {
    std::ifstream in(f, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    text += data::brown_untag(ss.str());
  }
  return text;
}

struct CharLstm : nn::Module {
  nn::Embedding emb;
  nn::LSTM lstm;
  nn::Linear head;
  CharLstm(const Config& c)
      : emb(256, c.embed), lstm(c.embed, c.hidden, {.num_layers = c.layers, .batch_first = true}),
        head(c.hidden, 256) {
    register_module("emb", emb);
    register_module("lstm", lstm);
    register_module("head", head);
  }
  // x [B, T] byte ids -> logits [B, T, 256] and the final state.
  std::tuple<Tensor, std::tuple<Tensor, Tensor>> forward(
      const Tensor& x, const std::optional<std::tuple<Tensor, Tensor>>& state) {
    auto [out, next] = lstm(emb(x), state);
    return {head(out), next};
  }
};

// `streams` equal slices of `text`, as a [streams, len] i64 tensor on the CPU.
Tensor as_streams(const std::string& text, int64_t streams) {
  const int64_t len = int64_t(text.size()) / streams;
  std::vector<int64_t> v(size_t(streams * len));
  for (int64_t b = 0; b < streams; ++b)
    for (int64_t i = 0; i < len; ++i) v[size_t(b * len + i)] = uint8_t(text[size_t(b * len + i)]);
  return tensor(v, {streams, len});
}

std::tuple<Tensor, Tensor> detach(const std::tuple<Tensor, Tensor>& s) {
  return {std::get<0>(s).detach(), std::get<1>(s).detach()};
}

Tensor loss_of(const Tensor& logits, const Tensor& y) {
  return nn::functional::cross_entropy(logits.reshape({-1, 256}), y.reshape({-1}));
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  CLI::App app{"ember: a character-level LSTM language model on the Brown corpus"};
  app.add_option("--data", cfg.data, "folder with the Brown corpus (bash scripts/fetch_data.sh brown)");
  namespace ex = ember::examples;
  app.add_option("--steps", cfg.steps, "training steps")->check(ex::WholeNumberIn(1, ex::kMaxCount));
  app.add_option("--device", cfg.device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--seed", cfg.seed, "seed for initialization and sampling")->check(ex::Seed);
  app.add_option("--hidden", cfg.hidden, "LSTM hidden size")->check(ex::WholeNumberIn(1, 1 << 16));
  app.add_option("--layers", cfg.layers, "LSTM layers")->check(ex::WholeNumberIn(1, 1024));
  app.add_option("--batch", cfg.batch, "parallel streams per step")->check(ex::WholeNumberIn(1, 1 << 20));
  app.add_option("--seq-len", cfg.seq_len, "bytes per stream per step (the BPTT length)")
      ->check(ex::WholeNumberIn(1, 1 << 20));
  app.add_option("--lr", cfg.lr, "AdamW learning rate")->check(ex::FinitePositiveNumber);
  app.add_option("--clip", cfg.clip, "max gradient norm")->check(ex::PositiveNumber);
  app.add_option("--eval-every", cfg.eval_every, "report and validate every N steps")
      ->check(ex::WholeNumberIn(1, ex::kMaxCount));
  app.add_option("--eval-batches", cfg.eval_batches, "validation windows of seq-len per report")
      ->check(ex::WholeNumberIn(1, 1 << 20));
  app.add_option("--sample", cfg.sample, "bytes to sample at the end (0: none)")->check(ex::WholeNumberIn(0, 1 << 30));
  app.add_option("--export-onnx", cfg.export_onnx,
                 "after training, write the model as ONNX to FILE (bytes and LSTM state -> logits and state)");
  if (const std::optional<int> rc = ex::parse_flags("char_lstm", app, argc, argv)) return *rc;

  return ex::exit_code_of("char_lstm", [&] {
    const Device dev = cfg.device == "cuda" ? Device::cuda(0) : Device::cpu();
    manual_seed(cfg.seed);
    if (!cfg.export_onnx.empty()) examples::prepare_output_file("char_lstm", "--export-onnx", cfg.export_onnx);
    const std::string text = load_brown(cfg.data);
    const size_t split = text.size() * 95 / 100;
    const Tensor train = as_streams(text.substr(0, split), cfg.batch).to(dev);
    const Tensor val = as_streams(text.substr(split), cfg.batch).to(dev);
    const int64_t T = cfg.seq_len, windows = (train.size(1) - 1) / T;
    const int64_t val_windows = (val.size(1) - 1) / T;
    EMBER_CHECK(windows > 0 && val_windows > 0, ValueError, "[char_lstm] the corpus is too small for --batch ",
                cfg.batch, " --seq-len ", T);
    EMBER_CHECK(val_windows >= cfg.eval_batches, ValueError, "[char_lstm] --eval-batches ", cfg.eval_batches,
                " is more than the ", val_windows, " windows of --seq-len ", T,
                " the validation split holds at --batch ", cfg.batch);
    std::printf("corpus: %zu bytes (train %zu, validation %zu); %lld streams of %lld bytes\n",
                text.size(), split, text.size() - split, (long long)cfg.batch, (long long)train.size(1));

    CharLstm model(cfg);
    model.to(dev);
    std::printf("model: %lld parameters, LSTM(%lld, %lld, num_layers=%lld), device %s\n",
                (long long)model.num_parameters(), (long long)cfg.embed, (long long)cfg.hidden,
                (long long)cfg.layers, cfg.device.c_str());
    optim::AdamW opt(model.parameters(), {.lr = cfg.lr, .weight_decay = cfg.weight_decay});

    auto validate = [&] {
      NoGradGuard ng;
      std::optional<std::tuple<Tensor, Tensor>> st;
      double total = 0;
      for (int64_t w = 0; w < cfg.eval_batches; ++w) {
        const Tensor x = val.narrow(1, w * T, T), y = val.narrow(1, w * T + 1, T);
        auto [logits, next] = model.forward(x, st);
        st = next;
        total += loss_of(logits, y).item<double>();
      }
      return total / double(cfg.eval_batches);
    };

    std::optional<std::tuple<Tensor, Tensor>> state;
    double interval_loss = 0, first_loss = NAN, last_loss = NAN, last_val = NAN;
    int64_t interval_steps = 0;
    auto t0 = std::chrono::steady_clock::now();
    double train_seconds = 0;
    for (int64_t step = 1; step <= cfg.steps; ++step) {
      const int64_t w = (step - 1) % windows;
      if (w == 0) state.reset();  // a new pass over the streams starts from zeros
      const Tensor x = train.narrow(1, w * T, T), y = train.narrow(1, w * T + 1, T);
      auto [logits, next] = model.forward(x, state);
      state = detach(next);
      Tensor loss = loss_of(logits, y);
      opt.zero_grad();
      loss.backward();
      optim::clip_grad_norm_(model.parameters(), cfg.clip);
      opt.step();
      interval_loss += loss.item<double>();
      ++interval_steps;
      if (step % cfg.eval_every == 0 || step == cfg.steps) {
        const auto t1 = std::chrono::steady_clock::now();
        const double secs = std::chrono::duration<double>(t1 - t0).count();
        train_seconds += secs;
        const double tl = interval_loss / double(interval_steps);
        last_val = validate();
        if (std::isnan(first_loss)) first_loss = tl;
        last_loss = tl;
        std::printf("step %5lld | train loss %.4f | val loss %.4f | %.0f tok/s\n", (long long)step, tl,
                    last_val, double(interval_steps * cfg.batch * T) / secs);
        std::fflush(stdout);
        interval_loss = 0;
        interval_steps = 0;
        t0 = std::chrono::steady_clock::now();
      }
    }

    if (cfg.sample > 0) {
      NoGradGuard ng;
      model.eval();
      std::mt19937_64 rng(cfg.seed);
      std::string out = "The ";
      std::optional<std::tuple<Tensor, Tensor>> st;
      std::vector<int64_t> prompt(out.begin(), out.end());
      Tensor x = tensor(prompt, {1, int64_t(prompt.size())}).to(dev);
      for (int64_t i = 0; i < cfg.sample; ++i) {
        auto [logits, next] = model.forward(x, st);
        st = next;
        const Tensor last = logits.select(1, logits.size(1) - 1).reshape({256});
        const Tensor p = nn::functional::softmax(last * (1.0 / 0.8), 0).to(Device::cpu(), DType::f64).contiguous();
        const double* pp = static_cast<const double*>(p.data_ptr());
        std::discrete_distribution<int> pick(pp, pp + 256);
        const int c = pick(rng);
        out.push_back(char(c));
        x = tensor(std::vector<int64_t>{c}, {1, 1}).to(dev);
      }
      std::printf("sample:\n%s\n", out.c_str());
    }
    if (!cfg.export_onnx.empty()) {
      // bytes [batch, time] and the state (h, c) [layers, batch, hidden] in, logits and the new
      // state out: a runtime carries the state from one call to the next, as the sampler does.
      model.eval();
      const auto state = [&](int64_t n) { return zeros({cfg.layers, n, cfg.hidden}, TensorOptions().device(dev)); };
      io::export_onnx(
          model,
          [&](const TensorList& in) {
            auto [logits, next] = model.forward(in[0], std::make_tuple(in[1], in[2]));
            return TensorList{logits, std::get<0>(next), std::get<1>(next)};
          },
          {zeros({1, 2}, TensorOptions(DType::i64).device(dev)), state(1), state(1)}, cfg.export_onnx,
          {.input_names = {"bytes", "h", "c"},
           .output_names = {"logits", "h_next", "c_next"},
           .dynamic_axes = {{"bytes", {{0, "batch"}, {1, "time"}}}, {"h", {{1, "batch"}}}, {"c", {{1, "batch"}}}}});
      std::printf("exported %s (ONNX opset 17): bytes [batch, time] int64, h and c [%lld, batch, %lld] -> "
                  "logits [batch, time, 256], h_next, c_next\n",
                  cfg.export_onnx.c_str(), (long long)cfg.layers, (long long)cfg.hidden);
    }
    ResultLine()
        .text("example", "char_lstm")
        .num("steps", double(cfg.steps))
        .num("first_train_loss", first_loss)
        .num("train_loss", last_loss)
        .num("val_loss", last_val)
        .num("tokens_per_s", double(cfg.steps * cfg.batch * T) / train_seconds)
        .print();
    return 0;
  });
}
