// gpt: train GPT-2 (the `tiny` preset on a CPU, `gpt2-small` = 124M on a GPU) or a Llama
// (`--arch llama`: `tiny` on a CPU, `llama-100m` on a GPU) on token shards, fine-tune a
// pretrained Hugging Face GPT-2 (`--init-from DIR`), or sample from a saved model. The whole
// loop a user would write: TokenShards batches, gradient accumulation, autocast (+ GradScaler
// for fp16), gradient clipping, AdamW with warmup + cosine decay, data parallel over mpirun
// ranks, validation, samples from a KV-cache generator (top-k / top-p, ending at
// <|endoftext|>), crash-safe checkpoints, metrics, and a final `result: {json}` line.
//
//   bash scripts/fetch_data.sh gpt2 brown && build/bin/gpt-prepare   # data/brown_tokens/
//   build/bin/gpt                                                     # tiny, CPU, 200 steps
//   build/bin/gpt --preset gpt2-small --device cuda --amp bf16 --batch-size 16 --seq-len 1024
//                 --total-batch-tokens 524288 --steps 5000 --checkpoint runs/gpt2
//   build/bin/gpt --preset gpt2-small --device cuda --amp bf16 --cuda-graph ...  # replayed step
//   mpirun -np 2 build/bin/gpt --ddp ...                              # one rank per GPU/CPU
//   mpirun -np 4 build/bin/gpt --fsdp ...                             # sharded: parameters, gradients, AdamW state / 4
//   build/bin/gpt --arch llama                                        # llama-tiny, CPU
//   build/bin/gpt --arch llama --preset llama-100m --device cuda --amp bf16 ...
//   build/bin/gpt --init-from gpt2 --lr 1e-4 --steps 100 --save-pretrained gpt2-ft  # fine-tune HF's gpt2
//   build/bin/gpt --generate --checkpoint runs/gpt2 --prompt "The jury said"
//   build/bin/gpt --generate --init-from gpt2 --prompt "The jury said" --top-p 0.9
//   build/bin/gpt --export-onnx gpt.onnx --checkpoint runs/gpt2       # logits in ONNX Runtime (README)
//
// Per step: --total-batch-tokens / (B * T * ranks) micro-batches of B x T tokens on each rank,
// their mean loss backpropagated (DDP reduces only after the last one: no_sync), the gradient
// norm clipped to --grad-clip, one AdamW step (betas 0.9/0.95, weight decay on matrices and
// embeddings only) at the schedule's lr. Resuming is bit-exact on the CPU: the checkpoint holds
// model, optimizer, scheduler, CPU RNG, step and the data position (TokenShards' whole state).
// A non-finite loss stops the run before anything is saved (exit 3).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <ember/amp.h>
#include <ember/data.h>
#include <ember/deterministic.h>
#include <ember/ember.h>

#include "common/profile_steps.h"
#include "common/train_log.h"
#include "common/cli_checks.h"

using namespace ember;
namespace fs = std::filesystem;

namespace {

struct Config {
  std::string data = "data/brown_tokens/brown_train_*.bin";
  std::string val_data = "data/brown_tokens/brown_val_*.bin";
  std::string tokenizer = "data/gpt2";
  std::string arch = "gpt", preset = "tiny", device = "cpu", amp = "off", checkpoint, out;
  std::string init_from;        // a Hugging Face GPT-2 folder (config.json + model.safetensors)
  std::string save_pretrained;  // write the trained GPT-2 there, in that layout
  std::string export_onnx;      // write the model of --checkpoint / --init-from there as ONNX
  int64_t batch_size = 8, seq_len = 0, total_batch_tokens = 0, steps = 200, warmup_steps = 20;
  int64_t eval_every = 50, eval_steps = 10, sample_every = 100, sample_tokens = 64;
  int64_t checkpoint_every = 0, log_every = 10;
  int64_t profile = 0;  // --profile N
  double lr = 1e-3, min_lr = -1, weight_decay = 0.1, grad_clip = 1.0;
  uint64_t seed = 0;
  int tp = 1;  // --tp N
  bool resume = false, ddp = false, fsdp = false, recompute = false, deterministic = false, cuda_graph = false;
  // --generate
  bool generate = false;
  std::string prompt;
  int64_t max_new_tokens = 100, top_k = 40;
  double temperature = 1.0, top_p = 1.0;
};

// Dense bf16 tensor-core FLOP per SM per clock: sm_80 (A100) 2048, sm_90 (H100/H200) 4096.
// 0 when unknown (MFU is then not shown). On a CPU there is no such ceiling either.
double peak_bf16_flops(Device dev) {
  if (!dev.is_cuda()) return 0;
  const cuda::DeviceProperties p = cuda::get_device_properties(dev.index);
  const double per_sm_clock = p.major == 9 ? 4096 : p.major == 8 && p.minor == 0 ? 2048 : 0;
  return per_sm_clock * p.multiprocessor_count * p.clock_rate_khz * 1e3;
}

// Training FLOPs per token (nanoGPT's estimate_mfu, PaLM appendix B): 6 N for the weights
// plus 12 L C T for the attention scores and values (forward and backward).
double flops_per_token(const nn::CausalLM& model, int64_t seq_len) {
  return 6.0 * double(model.num_parameters()) + 12.0 * double(model.n_layer() * model.n_embd() * seq_len);
}

// The preset's full name: --arch llama takes "tiny" as llama-tiny.
std::string preset_name(const std::string& arch, const std::string& preset) {
  return arch == "llama" && preset == "tiny" ? "llama-tiny" : preset;
}

// A fresh model of `arch` and `preset`, or (init_from non-empty) the pretrained GPT-2 there.
std::unique_ptr<nn::CausalLM> make_model(const std::string& arch, const std::string& preset,
                                         const std::string& init_from) {
  if (!init_from.empty()) {
    EMBER_CHECK(arch == "gpt", ValueError, "[gpt] --init-from reads GPT-2 checkpoints only, not --arch ", arch);
    return io::gpt2_from_pretrained(init_from);
  }
  if (arch == "llama") return std::make_unique<nn::Llama>(nn::LlamaConfig::preset(preset_name(arch, preset)));
  EMBER_CHECK(preset.rfind("llama", 0) != 0, ValueError, "[gpt] --preset ", preset, " needs --arch llama");
  return std::make_unique<nn::GPT>(nn::GPTConfig::preset(preset));
}

std::optional<data::GPT2Tokenizer> load_tokenizer(const std::string& dir) {
  if (!fs::exists(fs::path(dir) / "encoder.json")) return std::nullopt;
  return data::GPT2Tokenizer::from_dir(dir);
}

// Samples `tokens` tokens after `prompt` (the end-of-text token when empty) with a generator
// of its own, so sampling never changes the training run's random numbers.
// The text ends at the end-of-text token (not printed) or after `tokens` tokens.
std::string sample_text(const nn::CausalLM& model, const data::GPT2Tokenizer& tok, std::vector<int32_t> prompt,
                        nn::GenerationConfig options, uint64_t seed) {
  if (prompt.empty()) prompt.push_back(tok.eot_token());
  Generator gen(seed);
  options.generator = &gen;
  options.stop_token = tok.eot_token();
  const std::vector<int64_t> out = model.generate({std::vector<int64_t>(prompt.begin(), prompt.end())}, options)[0];
  std::vector<int32_t> generated;
  for (size_t i = prompt.size(); i < out.size(); ++i) {
    if (out[i] == tok.eot_token() || out[i] >= int64_t(tok.vocab_size())) continue;
    generated.push_back(int32_t(out[i]));
  }
  return tok.decode(generated);
}

// The model of the latest checkpoint in --checkpoint (rebuilt from its meta), or the pretrained
// folder --init-from when no --checkpoint is given, in eval mode on `dev`.
std::unique_ptr<nn::CausalLM> load_trained(const Config& cfg, Device dev) {
  std::unique_ptr<nn::CausalLM> model;
  if (!cfg.checkpoint.empty()) {
    std::optional<io::Checkpoint> ckpt = io::load_latest_checkpoint(cfg.checkpoint, dev);
    EMBER_CHECK(ckpt.has_value(), IOError, "[gpt] --checkpoint ", cfg.checkpoint, " holds no checkpoint");
    auto meta = [&](const std::string& key, const std::string& fallback) {
      return ckpt->meta.count(key) ? ckpt->meta.at(key) : fallback;
    };
    model = make_model(meta("arch", "gpt"), meta("preset", "tiny"), meta("init_from", ""));
    model->load_state_dict(ckpt->model);
  } else {
    model = make_model(cfg.arch, cfg.preset, cfg.init_from);
  }
  model->to(dev);
  model->eval();
  return model;
}

// --export-onnx FILE: the model of --checkpoint or --init-from as ONNX, token ids [batch,
// sequence] -> logits [batch, sequence, vocabulary], both axes dynamic (sequence up to the
// block size).
int export_onnx(const Config& cfg) {
  EMBER_CHECK(!cfg.checkpoint.empty() || !cfg.init_from.empty(), ValueError,
              "[gpt] --export-onnx needs --checkpoint DIR or --init-from DIR");
  examples::prepare_output_file("gpt", "--export-onnx", cfg.export_onnx);
  const Device dev = cfg.device == "cuda" ? Device::cuda(0) : Device::cpu();
  std::unique_ptr<nn::CausalLM> model = load_trained(cfg, dev);
  // A short example: the export traces the forward again one token longer.
  const int64_t T = std::max<int64_t>(1, std::min<int64_t>(8, model->block_size() - 1));
  const Tensor example = zeros({1, T}, TensorOptions(DType::i64).device(dev));
  nn::CausalLM& lm = *model;
  io::export_onnx(
      lm, [&](const TensorList& in) { return TensorList{lm.forward(in[0])}; }, {example}, cfg.export_onnx,
      {.input_names = {"ids"}, .output_names = {"logits"},
       .dynamic_axes = {{"ids", {{0, "batch"}, {1, "sequence"}}}}});
  std::printf("exported %s (ONNX opset 17): ids [batch, sequence <= %lld] int64 -> logits [batch, sequence, %lld]\n",
              cfg.export_onnx.c_str(), (long long)model->block_size(),
              (long long)lm.forward(example).size(-1));
  return 0;
}

// Samples from the model load_trained() finds.
int generate(const Config& cfg) {
  EMBER_CHECK(!cfg.checkpoint.empty() || !cfg.init_from.empty(), ValueError,
              "[gpt] --generate needs --checkpoint DIR or --init-from DIR");
  const Device dev = cfg.device == "cuda" ? Device::cuda(0) : Device::cpu();
  std::optional<data::GPT2Tokenizer> tok = load_tokenizer(cfg.tokenizer);
  EMBER_CHECK(tok.has_value(), IOError, "[gpt] --tokenizer ", cfg.tokenizer,
              " has no encoder.json (run: bash scripts/fetch_data.sh gpt2)");
  std::unique_ptr<nn::CausalLM> model = load_trained(cfg, dev);
  const nn::GenerationConfig options{.max_new_tokens = cfg.max_new_tokens, .temperature = cfg.temperature,
                                     .top_k = cfg.top_k, .top_p = cfg.top_p};
  std::printf("%s%s\n", cfg.prompt.c_str(), sample_text(*model, *tok, tok->encode(cfg.prompt), options, cfg.seed).c_str());
  return 0;
}

int train(const Config& cfg) {
  const bool parallel = cfg.ddp || cfg.fsdp || cfg.tp > 1;
  const int rank = parallel ? distributed::rank() : 0;  // who prints and writes files
  // --ddp/--fsdp/--tp: distributed owns the choice of this rank's GPU (the one its NCCL group is on).
  const DeviceType kind = cfg.device == "cuda" ? DeviceType::CUDA : DeviceType::CPU;
  const Device dev = parallel ? distributed::local_device(kind) : Device(kind, 0);
  // Where the run will write, checked before the model is built or a step taken.
  const std::string out_dir = examples::prepare_run_folders("gpt", cfg.out, cfg.checkpoint, "runs/gpt", rank == 0);
  if (rank == 0 && !cfg.save_pretrained.empty())
    examples::prepare_output_folder("gpt", "--save-pretrained", cfg.save_pretrained);
  // --tp N: a (ranks / N) x N mesh; the N ranks of a "tp" row hold one model split between
  // them and read the same batches; the "dp" axis is data parallel (--ddp or --fsdp).
  std::optional<distributed::DeviceMesh> mesh;
  if (cfg.tp > 1) {
    EMBER_CHECK(distributed::world_size() % cfg.tp == 0, ValueError, "[gpt] --tp ", cfg.tp,
                " does not divide the ", distributed::world_size(), " ranks");
    mesh.emplace(dev, std::vector<int>{distributed::world_size() / cfg.tp, cfg.tp}, std::vector<std::string>{"dp", "tp"});
    EMBER_CHECK(mesh->size("dp") == 1 || cfg.ddp || cfg.fsdp, ValueError, "[gpt] --tp ", cfg.tp, " over ",
                distributed::world_size(), " ranks leaves ", mesh->size("dp"),
                " data-parallel rows: add --ddp or --fsdp to average their gradients");
  }
  const int world = !parallel ? 1 : mesh ? mesh->size("dp") : distributed::world_size();  // data-parallel ranks
  const int data_rank = !parallel ? 0 : mesh ? mesh->coordinate("dp") : distributed::rank();
  const std::shared_ptr<distributed::ProcessGroup> dp_group =
      !parallel ? nullptr : mesh ? mesh->group("dp") : distributed::default_group(dev);
  manual_seed(cfg.seed);

  // ---- model, shapes, optimizer ----
  EMBER_CHECK(cfg.save_pretrained.empty() || cfg.arch == "gpt", ValueError,
              "[gpt] --save-pretrained writes GPT-2 folders only, not --arch ", cfg.arch);
  std::unique_ptr<nn::CausalLM> model_ptr = make_model(cfg.arch, cfg.preset, cfg.init_from);
  nn::CausalLM& model = *model_ptr;
  const std::string preset = cfg.init_from.empty() ? preset_name(cfg.arch, cfg.preset) : "init_from";
  model.recompute = cfg.recompute;
  model.to(dev);
  const int64_t B = cfg.batch_size, T = cfg.seq_len > 0 ? cfg.seq_len : model.block_size();
  EMBER_CHECK(T <= model.block_size(), ValueError, "[gpt] --seq-len ", T, " exceeds the block size ",
              model.block_size(), " of the model (", preset, ")");
  const int64_t tokens_per_micro = B * T * world;
  const int64_t total_batch = cfg.total_batch_tokens > 0 ? cfg.total_batch_tokens : tokens_per_micro;
  EMBER_CHECK(total_batch % tokens_per_micro == 0, ValueError, "[gpt] --total-batch-tokens ", total_batch,
              " must be a multiple of batch x seq-len x ranks = ", B, " x ", T, " x ", world, " = ",
              tokens_per_micro);
  const int64_t accum = total_batch / tokens_per_micro;

  data::TokenShards train_data(cfg.data, {.batch_size = B, .seq_len = T, .shuffle = true, .seed = cfg.seed,
                                          .rank = data_rank, .world_size = world,
                                          .vocab_size = model.vocab_size()});
  std::optional<data::TokenShards> val_data;
  if (cfg.eval_every > 0 && !cfg.val_data.empty())
    val_data.emplace(cfg.val_data, data::TokenShardsOptions{.batch_size = B, .seq_len = T, .shuffle = false,
                                                            .seed = 0, .rank = data_rank, .world_size = world,
                                                            .vocab_size = model.vocab_size()});
  // A folder given as --data takes every shard in it, gpt-prepare's val shards included: the
  // validation loss would then measure memorized text. Refuse any shard in both sets.
  if (val_data)
    for (const std::string& f : train_data.files())
      for (const std::string& g : val_data->files())
        EMBER_CHECK(!fs::equivalent(f, g), ValueError, "[gpt] shard ", f,
                    " is in both --data and --val-data; give --data the training shards only (e.g. ",
                    "data/brown_tokens/brown_train_*.bin)");

  // --fsdp: one unit per transformer block and the root (embeddings, final norm); the
  // optimizer steps on this rank's shards, grouped as the full parameters are.
  std::optional<distributed::FSDPModule> fsdp;
  if (mesh) {
    if (auto* gpt = dynamic_cast<nn::GPT*>(&model)) distributed::tensor_parallelize(*gpt, mesh->group("tp"));
    if (auto* llama = dynamic_cast<nn::Llama*>(&model)) distributed::tensor_parallelize(*llama, mesh->group("tp"));
  }
  if (cfg.fsdp) {
    const distributed::FSDPOptions sharding{.group = dp_group};
    if (auto* gpt = dynamic_cast<nn::GPT*>(&model))
      for (auto& b : gpt->blocks) distributed::fully_shard(*b, sharding);
    if (auto* llama = dynamic_cast<nn::Llama*>(&model))
      for (auto& b : llama->blocks) distributed::fully_shard(*b, sharding);
    fsdp = distributed::fully_shard(model, sharding);
  }
  auto groups = model.configure_optimizer_groups<optim::AdamWOptions>(
      cfg.weight_decay, {.lr = cfg.lr, .betas = {0.9, 0.95}, .eps = 1e-8, .capturable = cfg.cuda_graph});
  if (fsdp)
    for (auto& g : groups) g.params = fsdp->shards_of(g.params);
  optim::AdamW opt(std::move(groups));
  const double min_lr = cfg.min_lr >= 0 ? cfg.min_lr : cfg.lr / 10;
  optim::WarmupCosineLR schedule(opt, std::min(cfg.warmup_steps, cfg.steps - 1), cfg.steps, min_lr);
  std::unique_ptr<distributed::DistributedDataParallel> ddp;
  if (cfg.ddp) ddp = std::make_unique<distributed::DistributedDataParallel>(model, distributed::DDPOptions{}, dp_group);
  // The mean over the ranks of a scalar on `dev` (what rank 0 prints covers every rank). It is
  // reduced where it lives, on the group of the model's device (NCCL takes CUDA tensors only),
  // in f64 like the values read from it; item() is the one host sync.
  auto mean_over_ranks = [&](const Tensor& v) {
    Tensor t = v.detach().to(DType::f64).clone();
    if (ddp) ddp->process_group().all_reduce(t, distributed::ReduceOp::avg);
    if (fsdp) fsdp->process_group().all_reduce(t, distributed::ReduceOp::avg);
    return t.item<double>();
  };
  const bool use_amp = cfg.amp != "off";
  const DType amp_dtype = cfg.amp == "fp16" ? DType::f16 : DType::bf16;
  amp::GradScaler scaler({.enabled = cfg.amp == "fp16"});

  // ---- resume ----
  // --fsdp: a sharded checkpoint (each rank its pieces; loads at any number of ranks).
  int64_t step = 0;
  if (cfg.resume) {
    EMBER_CHECK(!cfg.checkpoint.empty(), ValueError, "[gpt] --resume needs --checkpoint DIR");
    std::optional<io::Checkpoint> ckpt;
    std::unique_ptr<io::ShardedCheckpointReader> sharded;
    if (fsdp) sharded = io::open_latest_sharded_checkpoint(cfg.checkpoint);
    else ckpt = io::load_latest_checkpoint(cfg.checkpoint, dev);
    if (ckpt || sharded) {
      const std::map<std::string, std::string>& meta = sharded ? sharded->meta() : ckpt->meta;
      const std::vector<std::pair<std::string, std::string>> run{
               {"arch", cfg.arch}, {"preset", preset}, {"init_from", cfg.init_from},
               {"seq_len", std::to_string(T)},
               {"total_batch_tokens", std::to_string(total_batch)},
               {"micro_batch_rows", std::to_string(B * world)}};
      for (const auto& [key, value] : run) {
        // Checkpoints from before --arch / --init-from hold a GPT from a preset; those from
        // before micro_batch_rows do not say.
        const auto it = meta.find(key);
        if (it == meta.end() && key == "micro_batch_rows") continue;
        const std::string saved = it != meta.end() ? it->second : key == "arch" ? "gpt" : "";
        EMBER_CHECK(saved == value, ValueError, "[gpt] the checkpoint in ", cfg.checkpoint, " has ", key, " ",
                    saved, ", this run ", value,
                    key == "micro_batch_rows" ? " (--batch-size x ranks must stay the same: each step then reads "
                                                "the same rows on any number of ranks)"
                                              : "");
      }
      if (sharded) {
        fsdp->load_sharded_state_dict(*sharded, &opt);
        schedule.load_state_dict(sharded->scheduler());
        default_generator(Device::cpu()).set_state(sharded->rng());
        step = sharded->step();
      } else {
        model.load_state_dict(ckpt->model);
        opt.load_state_dict(ckpt->optimizer);
        schedule.load_state_dict(ckpt->scheduler);
        default_generator(Device::cpu()).set_state(ckpt->rng);
        step = ckpt->step;
      }
      if (scaler.is_enabled() && meta.count("amp_scale")) {
        StateDict sd = scaler.state_dict();
        sd.set_scalar("scale", std::stod(meta.at("amp_scale")));
        sd.set_int("growth_tracker", std::stoll(meta.at("amp_growth_tracker")));
        scaler.load_state_dict(sd);
      }
      // The data position counts micro-batches of B x ranks rows (checked above), so the
      // batches continue as in an uninterrupted run.
      train_data.set_position(std::stoll(meta.at("data_position")));
      std::printf("resumed from %s/%s (step %lld)%s\n", cfg.checkpoint.c_str(),
                  io::checkpoint_folder_name(step).c_str(), (long long)step,
                  sharded ? str(", saved by ", sharded->saved_world_size(), " ranks").c_str() : "");
    } else {
      std::printf("no checkpoint in %s yet: starting fresh\n", cfg.checkpoint.c_str());
    }
  }
  auto save = [&](int64_t at_step, double loss) {
    // Every rank holds the same state under DDP (rank 0 saves); under FSDP each its pieces.
    if (cfg.checkpoint.empty() || (rank != 0 && !fsdp)) return;
    std::map<std::string, std::string> meta{
        {"arch", cfg.arch},              {"preset", preset},
        {"init_from", cfg.init_from},      {"seq_len", std::to_string(T)},
        {"batch_size", std::to_string(B)}, {"total_batch_tokens", std::to_string(total_batch)},
        {"micro_batch_rows", std::to_string(B * world)},
        {"seed", std::to_string(cfg.seed)}, {"train_loss", std::to_string(loss)},
        {"amp", cfg.amp},                   {"data_position", std::to_string(train_data.position())}};
    if (scaler.is_enabled()) {
      const StateDict sd = scaler.state_dict();
      char scale[64];
      std::snprintf(scale, sizeof scale, "%.17g", sd.scalar("scale"));
      meta["amp_scale"] = scale;
      meta["amp_growth_tracker"] = std::to_string(sd.integer("growth_tracker"));
    }
    if (fsdp) {
      io::save_sharded_checkpoint(cfg.checkpoint,
                                  {.state = fsdp->sharded_state_dict(&opt), .scheduler = schedule.state_dict(),
                                   .step = at_step, .rng = default_generator(Device::cpu()).get_state(), .meta = meta},
                                  rank, world, [&] { fsdp->process_group().barrier(); });
      return;
    }
    io::Checkpoint ckpt;
    ckpt.model = model.state_dict();
    ckpt.optimizer = opt.state_dict();
    ckpt.scheduler = schedule.state_dict();
    ckpt.step = at_step;
    ckpt.rng = default_generator(Device::cpu()).get_state();
    ckpt.meta = meta;
    io::save_checkpoint(cfg.checkpoint, ckpt);
  };

  auto evaluate = [&]() {
    NoGradGuard no_grad;
    model.eval();
    val_data->reset();
    Tensor sum = zeros({}, TensorOptions(DType::f64).device(dev));  // on the device: no sync per batch
    for (int64_t i = 0; i < cfg.eval_steps; ++i) {
      auto [x, y] = val_data->next();
      amp::autocast ac(dev, amp_dtype, use_amp);
      const Tensor xd = x.to(dev, true), yd = y.to(dev, true);
      sum += (fsdp ? fsdp->forward([&] { return model.forward(xd, yd); }) : model.forward(xd, yd)).to(DType::f64);
    }
    model.train();
    return mean_over_ranks(sum / double(cfg.eval_steps));
  };
  std::optional<data::GPT2Tokenizer> tokenizer;
  if (rank == 0 && cfg.sample_every > 0 && mesh) {
    std::printf("note: --tp trains without samples (generation over a split model is not built yet)\n");
  } else if (rank == 0 && cfg.sample_every > 0) {
    tokenizer = load_tokenizer(cfg.tokenizer);
    if (!tokenizer)
      std::printf("note: no tokenizer in %s (bash scripts/fetch_data.sh gpt2): no samples\n",
                  cfg.tokenizer.c_str());
  }

  std::optional<examples::MetricsLog> metrics;
  if (rank == 0)
    metrics.emplace(out_dir, std::vector<std::string>{"step", "train_loss", "val_loss", "lr", "grad_norm", "ms",
                                                      "tokens_per_s", "mfu"},
                    /*append=*/step > 0);
  examples::StepProfiler profile(cfg.profile, out_dir, rank == 0, dev.is_cuda());
  const double peak = peak_bf16_flops(dev), flops_token = flops_per_token(model, T);
  std::printf("gpt: %s (%lld parameters) on %s%s, %lld train tokens, batch %lld x %lld x %d ranks x %lld "
              "micro-steps = %lld tokens/step, AdamW lr %g -> %g, %lld steps\n",
              (cfg.arch + " " + preset).c_str(), (long long)model.num_parameters(), dev.is_cuda() ? "cuda" : "cpu",
              use_amp ? (" with " + cfg.amp + " autocast").c_str() : "", (long long)train_data.num_tokens(),
              (long long)B, (long long)T, world, (long long)accum, (long long)total_batch, cfg.lr, min_lr,
              (long long)cfg.steps);

  // ---- training ----
  examples::ProgressBar bar("train", cfg.steps, step);
  double last_loss = NAN, last_val = NAN, train_seconds = 0, last_tokens_per_s = 0, last_mfu = NAN;
  int64_t trained_steps = 0;
  model.train();
  // One optimizer step over the micro-batches (device tensors); leaves the summed loss and the
  // gradient norm in loss_sum / grad_norm_t, read after the step.
  using Batch = std::pair<Tensor, Tensor>;
  Tensor loss_sum, grad_norm_t;
  auto train_step = [&](const std::vector<Batch>& micro_batches) {
    opt.zero_grad();
    loss_sum = zeros({}, TensorOptions(DType::f32).device(dev));
    for (int64_t micro = 0; micro < accum; ++micro) {
      const auto& [xd, yd] = micro_batches[size_t(micro)];
      // DDP reduces the gradients only in the last micro-batch's backward.
      std::optional<distributed::DistributedDataParallel::NoSyncGuard> no_sync;
      if (ddp && micro + 1 < accum) no_sync.emplace(*ddp);
      std::optional<distributed::FSDPModule::NoSyncGuard> fsdp_no_sync;
      if (fsdp && micro + 1 < accum) fsdp_no_sync.emplace(*fsdp);
      Tensor loss;
      {
        amp::autocast ac(dev, amp_dtype, use_amp);
        loss = ddp    ? ddp->forward([&] { return model.forward(xd, yd); })
               : fsdp ? fsdp->forward([&] { return model.forward(xd, yd); })
                      : model.forward(xd, yd);
      }
      loss = loss / double(accum);  // the mean over the micro-batches, as one big batch
      scaler.scale(loss).backward();
      NoGradGuard no_grad;
      loss_sum += loss.detach().to(DType::f32);
    }
    scaler.unscale_(opt);
    grad_norm_t = mesh ? distributed::clip_grad_norm_tensor_parallel(model, mesh->group("tp"), cfg.grad_clip,
                                                                     fsdp ? &*fsdp : nullptr)
                  : fsdp ? fsdp->clip_grad_norm_(cfg.grad_clip)
                         : optim::clip_grad_norm_(model.parameters(), cfg.grad_clip);
    scaler.step(opt);  // skipped (fp16) when a gradient is inf/NaN
    scaler.update();
  };
  // --cuda-graph: the step captured once (after 3 eager ones) and replayed; it reads its
  // micro-batches from static tensors and leaves its results in graph_loss_sum / graph_norm.
  std::vector<Batch> static_batches;
  Tensor graph_loss_sum, graph_norm;
  std::optional<cuda::GraphedStep> graphed;
  if (cfg.cuda_graph)
    graphed.emplace([&] {
      train_step(static_batches);
      graph_loss_sum = loss_sum;
      graph_norm = grad_norm_t;
    });
  while (step < cfg.steps) {
    profile.begin_step();
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<Batch> micro_batches;
    for (int64_t micro = 0; micro < accum; ++micro) {
      auto [x, y] = train_data.next();
      micro_batches.emplace_back(x.to(dev, true), y.to(dev, true));
    }
    const double lr = opt.lr(0);
    if (graphed) {
      if (static_batches.empty())
        for (const auto& [xd, yd] : micro_batches)
          static_batches.emplace_back(zeros(xd.sizes(), TensorOptions(xd.dtype()).device(dev)),
                                      zeros(yd.sizes(), TensorOptions(yd.dtype()).device(dev)));
      for (size_t k = 0; k < micro_batches.size(); ++k) {
        static_batches[k].first.copy_(micro_batches[k].first);
        static_batches[k].second.copy_(micro_batches[k].second);
      }
      (*graphed)();
      loss_sum = graph_loss_sum;
      grad_norm_t = graph_norm;
    } else {
      train_step(micro_batches);
    }
    schedule.step();  // the next step's lr (a capturable AdamW's device lr is written too)
    ++step;
    const double grad_norm = grad_norm_t.item<double>();
    const double loss = mean_over_ranks(loss_sum);  // syncs the step
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    train_seconds += seconds;
    ++trained_steps;
    if (!std::isfinite(loss)) {
      bar.finish();
      std::fprintf(stderr, "gpt: the loss became %g at step %lld; stopping without saving a checkpoint "
                           "(try a lower --lr or --amp bf16)\n", loss, (long long)step);
      return 3;
    }
    last_loss = loss;
    last_tokens_per_s = double(total_batch) / seconds;
    last_mfu = peak > 0 ? flops_token * last_tokens_per_s / world / peak : NAN;
    const bool last = step == cfg.steps;
    double val = NAN;
    if (val_data && (step % cfg.eval_every == 0 || last)) val = last_val = evaluate();
    if (step % cfg.log_every == 0 || last || std::isfinite(val)) {
      char stats[160];
      std::snprintf(stats, sizeof stats, "loss %.4f%s lr %.2e norm %.2f %.0f ms", loss,
                    std::isfinite(val) ? (" val " + std::to_string(val).substr(0, 6)).c_str() : "", lr,
                    grad_norm, seconds * 1e3);
      std::string extra = stats;
      if (std::isfinite(last_mfu)) extra += " MFU " + std::to_string(int(std::lround(100 * last_mfu))) + "%";
      if (dev.is_cuda())
        extra += " mem " + std::to_string(cuda::max_memory_allocated(dev.index) >> 20) + " MiB";
      bar.update(step, extra, last_tokens_per_s, "tok/s");
      if (metrics)
        metrics->record({double(step), loss, val, lr, grad_norm, seconds * 1e3, last_tokens_per_s, last_mfu});
    }
    if (cfg.sample_every > 0 && (step % cfg.sample_every == 0 || last) && (tokenizer || fsdp) && !mesh) {
      // --fsdp: every rank gathers the whole model (a collective); rank 0 samples from it.
      std::optional<distributed::FSDPModule::FullParams> full;
      if (fsdp) full.emplace(*fsdp, /*writeback=*/false);
      if (tokenizer) {
        model.eval();
        const std::string text = sample_text(model, *tokenizer, {},
                                             {.max_new_tokens = cfg.sample_tokens, .temperature = 1.0, .top_k = 40},
                                             cfg.seed + uint64_t(step));
        model.train();
        std::printf("%s--- sample at step %lld ---\n%s\n---\n", isatty(fileno(stdout)) ? "\n" : "",
                    (long long)step, text.c_str());
      }
    }
    if (cfg.checkpoint_every > 0 && step % cfg.checkpoint_every == 0 && !last) save(step, loss);
    if (profile.end_step()) return 0;
  }
  bar.finish();
  save(step, last_loss);
  if (!cfg.save_pretrained.empty()) {
    std::optional<distributed::FSDPModule::FullParams> full;  // --fsdp: every rank gathers (collective)
    if (fsdp) full.emplace(*fsdp, /*writeback=*/false);
    if (rank == 0) {
      io::save_pretrained(dynamic_cast<const nn::GPT&>(model), cfg.save_pretrained);
      std::printf("saved a Hugging Face GPT-2 folder: %s\n", cfg.save_pretrained.c_str());
    }
  }
  if (rank != 0) return 0;
  if (metrics) metrics->write_svg("ember gpt (" + cfg.arch + " " + preset + ")");
  const double tokens_per_s = train_seconds > 0 ? double(trained_steps * total_batch) / train_seconds : 0;
  examples::ResultLine line;
  line.num("train_loss", last_loss)
      .num("val_loss", last_val)
      .num("tokens_per_s", tokens_per_s)
      .num("steps", double(step))
      .text("arch", cfg.arch)
      .text("preset", preset)
      .text("device", cfg.device)
      .text("amp", cfg.amp)
      .num("ranks", world * cfg.tp)
      .num("tp", cfg.tp);
  if (peak > 0) line.num("mfu", flops_token * tokens_per_s / world / peak);
  if (dev.is_cuda()) line.num("peak_memory_mib", double(cuda::max_memory_allocated(dev.index) >> 20));
  if (metrics) std::printf("metrics: %s, %s\n", metrics->csv_path().c_str(), metrics->svg_path().c_str());
  line.print();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  CLI::App app{"ember: train GPT-2 on token shards (build/bin/gpt-prepare), or sample from a checkpoint"};
  namespace ex = ember::examples;
  const CLI::Validator positive_count = ex::WholeNumberIn(1, ex::kMaxCount);
  const CLI::Validator count_or_zero = ex::WholeNumberIn(0, ex::kMaxCount);
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // later flags win
  app.add_option("--data", cfg.data, "training shards: a .bin file, a folder, or a pattern like dir/x_train_*.bin");
  app.add_option("--val-data", cfg.val_data, "validation shards ('' for none)");
  app.add_option("--tokenizer", cfg.tokenizer, "folder with GPT-2's encoder.json and vocab.bpe (samples)");
  app.add_option("--arch", cfg.arch, "architecture: gpt (GPT-2) or llama (RMSNorm, RoPE, SwiGLU, GQA)")
      ->check(CLI::IsMember({"gpt", "llama"}));
  app.add_option("--preset", cfg.preset,
                 "model size: tiny or gpt2-small (124M); with --arch llama: tiny (llama-tiny) or llama-100m")
      ->check(CLI::IsMember({"tiny", "gpt2-small", "gpt2", "llama-tiny", "llama-100m"}));
  app.add_option("--init-from", cfg.init_from,
                 "start from a Hugging Face GPT-2 folder (config.json + model.safetensors; replaces --preset)");
  app.add_option("--save-pretrained", cfg.save_pretrained,
                 "after training, write the model as a Hugging Face GPT-2 folder (transformers loads it)");
  app.add_option("--batch-size", cfg.batch_size, "sequences per micro-batch on each rank")
      ->check(ex::WholeNumberIn(1, int64_t(1) << 20));
  app.add_option("--seq-len", cfg.seq_len, "tokens per sequence (default: the preset's block size)")
      ->check(ex::WholeNumberIn(1, int64_t(1) << 20));
  app.add_option("--total-batch-tokens", cfg.total_batch_tokens,
                 "tokens per optimizer step over all ranks (gradient accumulation; default one micro-batch)")
      ->check(positive_count);
  app.add_option("--steps", cfg.steps, "optimizer steps")->check(positive_count);
  app.add_option("--lr", cfg.lr, "peak AdamW learning rate")->check(ex::FinitePositiveNumber);
  app.add_option("--min-lr", cfg.min_lr, "final learning rate of the cosine decay (default lr/10)")
      ->check(ex::FiniteNonNegativeNumber);
  app.add_option("--warmup-steps", cfg.warmup_steps, "linear warmup steps")->check(count_or_zero);
  app.add_option("--weight-decay", cfg.weight_decay, "AdamW weight decay on matrices and embeddings")
      ->check(ex::FiniteNonNegativeNumber);
  app.add_option("--grad-clip", cfg.grad_clip, "clip the gradient norm to this")->check(ex::FinitePositiveNumber);
  app.add_option("--amp", cfg.amp, "mixed precision: off, bf16, fp16 (with GradScaler)")
      ->check(CLI::IsMember({"off", "bf16", "fp16"}));
  app.add_option("--device", cfg.device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_flag("--ddp", cfg.ddp, "data parallel over the ranks of mpirun -np N");
  app.add_option("--tp", cfg.tp,
                 "tensor parallel: split each block's attention heads and MLP over N ranks (the other axis of "
                 "mpirun -np: --ddp or --fsdp)")
      ->check(ex::WholeNumberIn(1, 4096));
  app.add_flag("--fsdp", cfg.fsdp,
               "fully sharded data parallel (ZeRO-3) over the ranks of mpirun -np N: parameters, gradients and "
               "optimizer state divided over them, one unit per block");
  app.add_flag("--cuda-graph", cfg.cuda_graph,
               "capture the training step (all micro-batches, clipping, AdamW) in a CUDA graph after 3 eager "
               "steps and replay it (--device cuda; docs/performance.md)");
  app.add_flag("--recompute", cfg.recompute, "activation checkpointing: recompute each block in backward");
  app.add_option("--eval-every", cfg.eval_every, "validation loss every N steps (0: never)")->check(count_or_zero);
  app.add_option("--eval-steps", cfg.eval_steps, "validation micro-batches per evaluation")->check(positive_count);
  app.add_option("--sample-every", cfg.sample_every, "print a generated sample every N steps (0: never)")
      ->check(count_or_zero);
  app.add_option("--sample-tokens", cfg.sample_tokens, "tokens per sample")->check(positive_count);
  app.add_option("--checkpoint", cfg.checkpoint, "checkpoint folder (saved at the end and every --checkpoint-every)");
  app.add_option("--checkpoint-every", cfg.checkpoint_every, "also save every N steps")->check(count_or_zero);
  app.add_flag("--resume", cfg.resume, "continue from the latest checkpoint in --checkpoint");
  app.add_option("--log-every", cfg.log_every, "log a step every N steps")->check(positive_count);
  app.add_option("--out", cfg.out, "folder for metrics.csv and metrics.svg (default: --checkpoint or runs/gpt)");
  app.add_option("--seed", cfg.seed, "seed for initialization, data order and samples")->check(ex::Seed);
  app.add_option("--profile", cfg.profile,
                 "profile N steps after 2 warm-up steps: print the op table, write <out>/trace.json, stop")
      ->check(count_or_zero);
  app.add_flag("--deterministic", cfg.deterministic, "ember::set_deterministic(true)");
  app.add_option("--export-onnx", cfg.export_onnx,
                 "write the model of --checkpoint (latest) or --init-from as ONNX to FILE, and exit");
  app.add_flag("--generate", cfg.generate,
               "sample from the latest checkpoint in --checkpoint (or from --init-from) instead of training");
  app.add_option("--prompt", cfg.prompt, "--generate: the text to continue");
  app.add_option("--max-new-tokens", cfg.max_new_tokens, "--generate: tokens to sample")->check(positive_count);
  app.add_option("--temperature", cfg.temperature, "--generate: softmax temperature (0: greedy)")
      ->check(ex::FiniteNonNegativeNumber);
  app.add_option("--top-k", cfg.top_k, "--generate: sample among the k likeliest tokens (0: all)")
      ->check(count_or_zero);
  app.add_option("--top-p", cfg.top_p, "--generate: sample among the likeliest tokens holding this probability")
      ->check(ex::NumberIn(0, 1));
  if (const std::optional<int> rc = ex::parse_flags("gpt", app, argc, argv)) return *rc;
  ember::set_deterministic(cfg.deterministic);
  if (cfg.resume && cfg.checkpoint.empty()) {
    std::fprintf(stderr, "gpt: --resume needs --checkpoint DIR (the folder to continue from)\n");
    return 2;
  }
  if (cfg.cuda_graph && (cfg.device != "cuda" || cfg.ddp || cfg.fsdp || cfg.generate)) {
    // DDP's all-reduce hooks (and FSDP's gathers) are not capturable yet.
    std::fprintf(stderr, "gpt: --cuda-graph needs --device cuda, and does not support --ddp, --fsdp or --generate\n");
    return 2;
  }
  if (cfg.tp > 1 && (cfg.generate || !cfg.checkpoint.empty() || cfg.resume || !cfg.save_pretrained.empty() ||
                     cfg.cuda_graph)) {
    std::fprintf(stderr, "gpt: --tp splits the model for training; it does not yet combine with --generate, "
                         "--checkpoint/--resume, --save-pretrained or --cuda-graph\n");
    return 2;
  }
  if (!cfg.export_onnx.empty() && (cfg.generate || cfg.ddp || cfg.fsdp || cfg.tp > 1 || cfg.resume ||
                                   !cfg.save_pretrained.empty())) {
    std::fprintf(stderr, "gpt: --export-onnx exports a saved model in one process; it does not combine with "
                         "--generate, --ddp, --fsdp, --tp, --resume or --save-pretrained\n");
    return 2;
  }
  if (cfg.fsdp && (cfg.ddp || cfg.generate)) {
    std::fprintf(stderr, "gpt: --fsdp trains (sharding over the ranks); it does not combine with --ddp or "
                         "--generate\n");
    return 2;
  }
  if (cfg.ddp || cfg.fsdp || cfg.tp > 1) {
    // NCCL only where the model is: a CPU run needs no communicator (nor a GPU per rank).
    distributed::init({.nccl = cfg.device == "cuda"});
    if (distributed::rank() != 0 && std::freopen("/dev/null", "w", stdout) == nullptr) return 1;
    return distributed::abort_on_error([&] {
      const int rc = train(cfg);
      distributed::finalize();
      return rc;
    });
  }
  return ember::examples::exit_code_of("gpt", [&] {
    return !cfg.export_onnx.empty() ? export_onnx(cfg) : cfg.generate ? generate(cfg) : train(cfg);
  });
}
