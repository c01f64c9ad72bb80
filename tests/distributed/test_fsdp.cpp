// fully_shard (FSDP, ZeRO-3) and the subgroups it and tensor parallelism shard over. Every
// test body holds at any world size (1 process, mpirun -np 2 and -np 4): FSDP is compared with
// DDP over the same ranks on the same batches (DDP itself is checked against one process on the
// whole batch in test_ddp.cpp), and subgroups with sums each rank works out from its rank.
#include <unistd.h>

#include <filesystem>

#include "dist_util.h"

using namespace ember;
using namespace ember::test;
using distributed::FSDPModule;
using distributed::fully_shard;

namespace {

nn::GPTConfig tiny_gpt() {
  nn::GPTConfig c;
  c.n_layer = 3;
  c.n_head = 2;
  c.n_embd = 32;
  c.block_size = 16;
  c.vocab_size = 60;
  c.padded_vocab_size = 64;
  return c;
}

// This rank's batch of step `step`: different on every rank.
std::pair<Tensor, Tensor> rank_batch(int step, int64_t rows = 2) {
  Generator gen(7000 + uint64_t(step) * 64 + uint64_t(my_rank()));
  Tensor x = randint(0, 60, {rows, 16}, DType::i64, &gen);
  Tensor y = randint(0, 60, {rows, 16}, DType::i64, &gen);
  return {x, y};
}

FSDPModule shard_gpt(nn::GPT& m, distributed::FSDPOptions o = {}) {
  for (auto& b : m.blocks) fully_shard(*b, o);
  return fully_shard(m, o);
}

std::vector<optim::ParamGroup<optim::AdamWOptions>> groups_over(
    std::vector<optim::ParamGroup<optim::AdamWOptions>> groups, const FSDPModule* fsdp) {
  if (fsdp)
    for (auto& g : groups) g.params = fsdp->shards_of(g.params);
  return groups;
}

double max_state_diff(const StateDict& a, const StateDict& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (const auto& [name, t] : a) m = std::max(m, max_abs_diff(t, b.at(name)));
  return m;
}

}  // namespace

// ---- subgroups ----

TEST(Mesh, NewGroupReducesOverItsRanksOnly) {
  const int W = world();
  // The odd world ranks (rank 0 alone in a world of one).
  std::vector<int> odd;
  for (int r = W > 1 ? 1 : 0; r < W; r += 2) odd.push_back(r);
  auto g = distributed::new_group(odd, Device::cpu(), "odd");
  const bool member = std::find(odd.begin(), odd.end(), my_rank()) != odd.end();
  ASSERT_EQ(bool(g), member);
  if (!g) return;
  EXPECT_EQ(g->name(), "odd");
  EXPECT_EQ(g->size(), int(odd.size()));
  EXPECT_EQ(g->global_ranks(), odd);
  EXPECT_EQ(odd[size_t(g->rank())], my_rank());
  Tensor t = full({3}, double(my_rank()));
  g->all_reduce(t);
  double expect = 0;
  for (int r : odd) expect += r;
  EXPECT_EQ(t.to_vector<float>(), std::vector<float>(3, float(expect)));
  // Its errors name it.
  Tensor strided = zeros({4, 4}).t();
  try {
    g->all_reduce(strided);
    FAIL() << "a non-contiguous tensor was accepted";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("of group 'odd'"), std::string::npos) << e.what();
  }
}

TEST(Mesh, RowsAndColumnsOfATwoDimensionalMesh) {
  const int W = world();
  const int tp = W % 2 == 0 ? 2 : 1, dp = W / tp;
  distributed::DeviceMesh mesh(Device::cpu(), {dp, tp}, {"dp", "tp"});
  const int i = my_rank() / tp, j = my_rank() % tp;
  EXPECT_EQ(mesh.coordinate("dp"), i);
  EXPECT_EQ(mesh.coordinate("tp"), j);
  auto row = mesh.group("tp"), col = mesh.group("dp");
  ASSERT_TRUE(row && col);
  EXPECT_EQ(row->size(), tp);
  EXPECT_EQ(col->size(), dp);
  EXPECT_EQ(row->rank(), j);
  EXPECT_EQ(col->rank(), i);
  // The sum of the world ranks in this rank's row (i tp + 0 .. tp - 1) and column (j, j + tp, ...).
  Tensor a = full({1}, double(my_rank())), b = full({1}, double(my_rank()));
  row->all_reduce(a);
  col->all_reduce(b);
  double row_sum = 0, col_sum = 0;
  for (int c = 0; c < tp; ++c) row_sum += i * tp + c;
  for (int r = 0; r < dp; ++r) col_sum += r * tp + j;
  EXPECT_EQ(a.item<double>(), row_sum);
  EXPECT_EQ(b.item<double>(), col_sum);
  // all_gather within the row: its ranks in order.
  Tensor gathered = empty({tp});
  row->all_gather(gathered, full({1}, double(my_rank())));
  for (int c = 0; c < tp; ++c) EXPECT_EQ(gathered.to_vector<float>()[size_t(c)], float(i * tp + c));
  EXPECT_THROW(mesh.group("pp"), ValueError);
}

TEST(Mesh, MisuseIsRefusedOnEveryRank) {
  EXPECT_THROW(distributed::new_group({}), ValueError);
  EXPECT_THROW(distributed::new_group({0, 0}), ValueError);
  EXPECT_THROW(distributed::new_group({world()}), ValueError);
  EXPECT_THROW(distributed::DeviceMesh(Device::cpu(), {world() + 1}, {"dp"}), ValueError);
  EXPECT_THROW(distributed::DeviceMesh(Device::cpu(), {world(), 1}, {"dp", "dp"}), ValueError);
  if (world() > 1) {
    // Ranks that disagree about the group: every rank fails, naming them.
    std::vector<int> mine = my_rank() == 0 ? std::vector<int>{0} : std::vector<int>{0, 1};
    try {
      distributed::new_group(mine);
      FAIL() << "ranks passing different lists made a group";
    } catch (const distributed::DistributedError& e) {
      EXPECT_NE(std::string(e.what()).find("passed other arguments than rank 0"), std::string::npos) << e.what();
    }
  }
}

// ---- FSDP ----

// 20 AdamW steps with weight-decay groups over the shards, each rank on its own batch: the
// losses and the final weights equal DDP's (bit for bit up to 2 ranks; see fsdp.h).
TEST(FSDP, GptTrainsAsDdpDoes) {
  Generator g1(11), g2(11);
  nn::GPT ref(tiny_gpt(), &g1), model(tiny_gpt(), &g2);
  distributed::DistributedDataParallel ddp(ref);
  FSDPModule fsdp = shard_gpt(model);
  EXPECT_EQ(fsdp.units().size(), 4u);  // 3 blocks and the root (wte, wpe, ln_f)
  optim::AdamW ref_opt(groups_over(ref.configure_optimizer_groups<optim::AdamWOptions>(0.1, {.lr = 1e-2}), nullptr));
  optim::AdamW opt(groups_over(model.configure_optimizer_groups<optim::AdamWOptions>(0.1, {.lr = 1e-2}), &fsdp));
  double worst_loss = 0;
  for (int s = 0; s < 20; ++s) {
    auto [x, y] = rank_batch(s);
    Tensor l1 = ddp.forward([&] { return ref.forward(x, y); });
    ref_opt.zero_grad();
    l1.backward();
    ref_opt.step();
    Tensor l2 = fsdp.forward([&] { return model.forward(x, y); });
    opt.zero_grad();
    l2.backward();
    opt.step();
    worst_loss = std::max(worst_loss, std::abs(l1.item<double>() - l2.item<double>()));
  }
  const double w = max_state_diff(ref.state_dict(), fsdp.full_state_dict());
  std::printf("FSDP vs DDP, %d ranks, 20 AdamW steps on GPT: loss difference %.3g, weight difference %.3g\n",
              world(), worst_loss, w);
  if (world() <= 2) {
    EXPECT_EQ(worst_loss, 0.0);
    EXPECT_EQ(w, 0.0);
  } else {
    // MPI sums 4 ranks' gradients in another order for all-reduce than for reduce-scatter:
    // last-bit differences, which Adam (dividing by sqrt(v)) turns into up to lr per step for
    // an element whose gradient is near zero (1.7e-4 measured after 20 steps at lr 1e-2).
    // (6e-4 with 3 ranks).
    EXPECT_LT(worst_loss, 2e-5);
    EXPECT_LT(w, 2e-3);
  }
  const distributed::FSDPMemory mem = fsdp.memory();
  const int64_t n = static_cast<const nn::Module&>(model).num_parameters();  // wpe included
  // Each unit pads to a multiple of the world size: at most W - 1 elements per unit.
  EXPECT_LE(mem.sharded_parameters, (n / world() + 4 * world()) * 4);
  EXPECT_GE(mem.sharded_parameters, n / world() * 4);
  EXPECT_EQ(mem.gathered_now, 0);  // everything freed after the backward
  EXPECT_GT(mem.gathered_peak, 0);
  EXPECT_LE(mem.gathered_peak, n * 4 + 4 * world() * 4);
}

// Activation checkpointing (GPT's recompute: the blocks run again inside backward) changes
// nothing; gradient accumulation under no_sync (full gradients summed locally, reduced once)
// equals DDP's no_sync (the same sums, reduced once) bit for bit up to 2 ranks.
TEST(FSDP, RecomputeAndNoSyncAccumulationMatch) {
  constexpr int kSteps = 4, kMicro = 2;
  auto train = [&](bool fsdp_mode, bool recompute, bool no_sync) {
    Generator g(12);
    nn::GPT model(tiny_gpt(), &g);
    model.recompute = recompute;
    std::optional<FSDPModule> fsdp;
    std::optional<distributed::DistributedDataParallel> ddp;
    if (fsdp_mode) fsdp.emplace(shard_gpt(model));
    else ddp.emplace(model);
    optim::AdamW opt(fsdp ? fsdp->parameters() : model.parameters(), {.lr = 1e-2});
    for (int s = 0; s < kSteps; ++s) {
      opt.zero_grad();
      for (int micro = 0; micro < kMicro; ++micro) {
        auto [x, y] = rank_batch(10 * s + micro);
        std::optional<FSDPModule::NoSyncGuard> fsdp_guard;
        std::optional<distributed::DistributedDataParallel::NoSyncGuard> ddp_guard;
        if (no_sync && micro + 1 < kMicro) {
          if (fsdp) fsdp_guard.emplace(*fsdp);
          else ddp_guard.emplace(*ddp);
        }
        auto run = [&] { return model.forward(x, y); };
        Tensor loss = fsdp ? fsdp->forward(run) : ddp->forward(run);
        (loss * (1.0 / kMicro)).backward();
      }
      if (fsdp) fsdp->finish_gradient_synchronization();
      opt.step();
    }
    if (fsdp) return fsdp->full_state_dict();
    StateDict out;
    for (const auto& [name, t] : model.state_dict()) out.insert(name, t.clone());
    return out;
  };
  const StateDict fsdp_plain = train(true, false, false);
  const double d_recompute = max_state_diff(fsdp_plain, train(true, true, false));
  const double d_ddp = max_state_diff(fsdp_plain, train(false, false, false));
  const double d_no_sync = max_state_diff(train(true, false, true), train(false, false, true));
  std::printf("FSDP %d ranks: recompute vs plain %.3g; vs DDP with 2 micro-batches: reduced each %.3g, "
              "under no_sync %.3g\n", world(), d_recompute, d_ddp, d_no_sync);
  EXPECT_EQ(d_recompute, 0.0);  // the same ops on the same values
  // Reduced at each micro-batch, DDP averages (its first average + the second local
  // gradient) where FSDP adds two averages: the same sum in another order, amplified by Adam.
  EXPECT_LT(d_ddp, 1e-4);
  EXPECT_LE(d_no_sync, world() <= 2 ? 0.0 : 1e-4);
}

// clip_grad_norm_ over the shards = optim::clip_grad_norm_ over the full averaged gradients.
TEST(FSDP, ClipGradNormSeesEveryShard) {
  Generator g1(13), g2(13);
  nn::GPT ref(tiny_gpt(), &g1), model(tiny_gpt(), &g2);
  distributed::DistributedDataParallel ddp(ref);
  FSDPModule fsdp = shard_gpt(model);
  auto [x, y] = rank_batch(0);
  ddp.forward([&] { return ref.forward(x, y); }).backward();
  fsdp.forward([&] { return model.forward(x, y); }).backward();
  std::vector<Tensor> before;
  for (const Tensor& p : fsdp.parameters()) before.push_back(p.grad().clone());
  const double n1 = optim::clip_grad_norm_(ref.parameters(), 0.05).item<double>();
  const double n2 = fsdp.clip_grad_norm_(0.05).item<double>();
  EXPECT_NEAR(n1, n2, 1e-6 * n1);
  EXPECT_GT(n1, 0.05);  // so that the clipping did something
  // Every piece scaled by the same coefficient.
  const double coef = 0.05 / (n2 + 1e-6);
  const auto pieces = fsdp.parameters();
  ASSERT_EQ(pieces.size(), before.size());
  for (size_t i = 0; i < pieces.size(); ++i)
    EXPECT_LT(max_abs_diff(pieces[i].grad(), before[i] * coef), 1e-7) << i;
}

// MixedPrecision{bf16 parameters, f32 reduction}: the forward computes on the bf16 rounding of
// the f32 shards (the loss equals the reference model cast to bf16, bit for bit), the bf16
// gradients are averaged in f32 and an SGD step (p -= g) lands on the f32 masters; the full
// state dict is those f32 masters.
TEST(FSDP, MixedPrecisionComputesInBf16AndKeepsF32Masters) {
  Generator g1(16), g2(16);
  nn::GPT ref(tiny_gpt(), &g1), model(tiny_gpt(), &g2);
  StateDict start;
  for (const auto& [name, t] : ref.state_dict()) start.insert(name, t.clone());
  ref.to(DType::bf16);
  FSDPModule fsdp = shard_gpt(model, {.mixed_precision = {.param_dtype = DType::bf16, .reduce_dtype = DType::f32}});
  EXPECT_EQ(model.blocks[0]->mlp.c_fc.weight.dtype(), DType::bf16);  // the compute copies
  for (const Tensor& p : fsdp.parameters()) EXPECT_EQ(p.dtype(), DType::f32);
  optim::SGD opt(fsdp.parameters(), {.lr = 1.0});
  auto [x, y] = rank_batch(5);
  Tensor ref_loss = ref.forward(x, y);
  Tensor loss = fsdp.forward([&] { return model.forward(x, y); });
  EXPECT_EQ(loss.dtype(), ref_loss.dtype());
  EXPECT_EQ(loss.to(DType::f32).item<float>(), ref_loss.to(DType::f32).item<float>());
  ref_loss.backward();
  opt.zero_grad();
  loss.backward();
  opt.step();
  // The reference update: start - average over the ranks of the bf16 gradients, in f32.
  auto group = distributed::default_group();
  const StateDict after = fsdp.full_state_dict();
  double worst = 0;
  for (const auto& [name, p] : ref.named_parameters()) {
    Tensor g = p.grad().to(DType::f32).contiguous();
    group->all_reduce(g, distributed::ReduceOp::avg);
    const Tensor expect = start.at(name) - g;
    EXPECT_EQ(after.at(name).dtype(), DType::f32) << name;
    worst = std::max(worst, max_abs_diff(after.at(name), expect));
  }
  EXPECT_EQ(worst, 0.0);
  EXPECT_THROW(fsdp.summon_full_params(/*writeback=*/true), ValueError);
}

// Reading a sharded parameter outside forward/backward is an error, not garbage;
// summon_full_params and the full state dict give the values; a full state dict loads back.
TEST(FSDP, FullParametersAndStateDicts) {
  Generator g(14);
  nn::GPT model(tiny_gpt(), &g);
  const StateDict before = model.state_dict();
  StateDict saved;
  for (const auto& [name, t] : before) saved.insert(name, t.clone());
  FSDPModule fsdp = shard_gpt(model);
  EXPECT_THROW(model.blocks[0]->attn.c_attn.weight.sum(), ValueError);
  EXPECT_THROW(fully_shard(*model.blocks[0]), ValueError);
  {
    auto full = fsdp.summon_full_params();
    EXPECT_EQ(max_state_diff(saved, model.state_dict()), 0.0);
  }
  EXPECT_EQ(max_state_diff(saved, fsdp.full_state_dict()), 0.0);
  // Train a little, then load the saved state back: the weights and the loss are the start's.
  optim::AdamW opt(fsdp.parameters(), {.lr = 1e-2});
  auto [x, y] = rank_batch(3);
  const double loss0 = fsdp.forward([&] { return model.forward(x, y); }).item<double>();
  for (int s = 0; s < 3; ++s) {
    Tensor loss = fsdp.forward([&] { return model.forward(x, y); });
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  EXPECT_GT(max_state_diff(saved, fsdp.full_state_dict()), 1e-3);
  fsdp.load_full_state_dict(saved);
  EXPECT_EQ(max_state_diff(saved, fsdp.full_state_dict()), 0.0);
  EXPECT_EQ(fsdp.forward([&] { return model.forward(x, y); }).item<double>(), loss0);
}

// A unit whose parameters get no gradient keeps the iteration open: the next forward says which.
TEST(FSDP, AParameterWithoutGradientIsNamed) {
  Generator g(15);
  nn::GPT model(tiny_gpt(), &g);
  FSDPModule fsdp = shard_gpt(model);
  auto [x, y] = rank_batch(0);
  // Only the logits' first column: every parameter still gets a gradient (zeros reach all).
  Tensor loss = fsdp.forward([&] { return model.forward(x, y); });
  loss.backward();
  fsdp.finish_gradient_synchronization();
  // Freeze nothing, but run a forward whose output ignores the blocks' parameters' gradients
  // on purpose: detach after the blocks.
  Tensor l2 = fsdp.forward([&] { return model.forward(x).detach().requires_grad_(true).sum() + model.wte.weight.sum(); });
  l2.backward();
  EXPECT_THROW(fsdp.finish_gradient_synchronization(), distributed::DistributedError);
  try {
    fsdp.forward([&] { return model.forward(x, y); });
    FAIL() << "an incomplete iteration went unnoticed";
  } catch (const distributed::DistributedError& e) {
    EXPECT_NE(std::string(e.what()).find("h.0.attn.c_attn.weight"), std::string::npos) << e.what();
  }
}

// Note [sharded state]: a checkpoint saved by W ranks (each its own pieces of the weights and of
// AdamW's state) resumes on W ranks bit for bit as the uninterrupted run, and on W/2 ranks and
// on 1 (subgroups of this job, each loading the same files) within round-off, every run on the
// same global batches.
TEST(FSDP, ShardedCheckpointResumesAtAnyWorldSize) {
  constexpr int kBefore = 3, kAfter = 3;
  const int W = world();
  auto world_group = distributed::default_group();
  // A folder every rank agrees on: rank 0's pid.
  Tensor id = full({1}, double(my_rank() == 0 ? getpid() : 0), DType::i64);
  world_group->all_reduce(id, distributed::ReduceOp::max);
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("ember_fsdp_ckpt_" + std::to_string(id.item<int64_t>()));
  // Step s's rows of original rank r; a member of an n-rank group takes W / n ranks' rows.
  auto batch = [&](int step, int member, int n) {
    std::vector<Tensor> xs, ys;
    for (int r = member * (W / n); r < (member + 1) * (W / n); ++r) {
      Generator gen(9000 + uint64_t(step) * 64 + uint64_t(r));
      xs.push_back(randint(0, 60, {2, 16}, DType::i64, &gen));
      ys.push_back(randint(0, 60, {2, 16}, DType::i64, &gen));
    }
    return std::make_pair(cat(xs, 0), cat(ys, 0));
  };
  struct Run {
    std::unique_ptr<nn::GPT> model;
    std::optional<FSDPModule> fsdp;
    std::unique_ptr<optim::AdamW> opt;
  };
  auto make = [&](uint64_t seed, std::shared_ptr<distributed::ProcessGroup> group) {
    Run run;
    Generator g(seed);
    run.model = std::make_unique<nn::GPT>(tiny_gpt(), &g);
    run.fsdp.emplace(shard_gpt(*run.model, {.group = group}));
    run.opt = std::make_unique<optim::AdamW>(
        groups_over(run.model->configure_optimizer_groups<optim::AdamWOptions>(0.1, {.lr = 1e-2}), &*run.fsdp));
    return run;
  };
  auto train = [&](Run& run, int from, int to) {
    auto& group = run.fsdp->process_group();
    for (int s = from; s < to; ++s) {
      auto [x, y] = batch(s, group.rank(), group.size());
      Tensor loss = run.fsdp->forward([&] { return run.model->forward(x, y); });
      run.opt->zero_grad();
      loss.backward();
      run.opt->step();
    }
  };
  // The uninterrupted run, saving after kBefore steps.
  Run a = make(17, world_group);
  train(a, 0, kBefore);
  const std::string saved = io::save_sharded_checkpoint(
      dir.string(), {.state = a.fsdp->sharded_state_dict(a.opt.get()), .step = kBefore}, my_rank(), W,
      [&] { world_group->barrier(); });
  train(a, kBefore, kBefore + kAfter);
  const StateDict expect = a.fsdp->full_state_dict();
  io::ShardedCheckpointReader reader(saved);
  EXPECT_EQ(reader.saved_world_size(), W);
  EXPECT_EQ(reader.step(), kBefore);
  auto resumed = [&](std::shared_ptr<distributed::ProcessGroup> group) {
    Run b = make(99, group);  // other initial weights: the checkpoint must replace them
    b.fsdp->load_sharded_state_dict(reader, b.opt.get());
    train(b, kBefore, kBefore + kAfter);
    return max_state_diff(expect, b.fsdp->full_state_dict());
  };
  const double same = resumed(world_group);
  const double half = W >= 2 && W % 2 == 0 ? resumed(world_group->split(my_rank() / (W / 2), my_rank(), "half")) : 0.0;
  const double one = resumed(world_group->split(my_rank(), 0, "self"));
  std::printf("FSDP checkpoint saved by %d ranks, %d more steps: resumed on %d %.3g, on %d %.3g, on 1 %.3g\n", W,
              kAfter, W, same, W / 2, half, one);
  EXPECT_EQ(same, 0.0);
  // Other world sizes sum the gradients in another order: last bits, through Adam.
  EXPECT_LT(half, 1e-4);
  EXPECT_LT(one, 1e-4);
  world_group->barrier();
  if (my_rank() == 0) std::filesystem::remove_all(dir);
}

// The NCCL paths on this rank's GPU (a world of one in the CUDA simulation, one rank per GPU on
// a machine with several): ncclCommSplit subgroups, and fully_shard over NCCL training the MLP
// as fully_shard over the CPU group does on the same batches.
TEST(FSDP, NcclSplitAndStepsMatchTheCpu) {
  EMBER_NCCL_DEVICE_OR_SKIP(dev);
  auto world_gpu = distributed::default_group(dev);
  auto alone = world_gpu->split(my_rank(), 0, "alone");
  ASSERT_TRUE(alone);
  EXPECT_STREQ(alone->backend(), "nccl");
  EXPECT_EQ(alone->size(), 1);
  EXPECT_EQ(alone->global_ranks(), std::vector<int>{my_rank()});
  Tensor t = full({3}, 2.0, TensorOptions(dev));
  alone->all_reduce(t);
  EXPECT_EQ(t.cpu().to_vector<float>(), std::vector<float>(3, 2.0f));
  EXPECT_EQ(world_gpu->split(-1, 0, "none"), nullptr);
  auto run = [&](Device d) {
    manual_seed(40);
    Mlp net;
    net.to(d);
    for (nn::Linear* l : {&net.fc1, &net.fc2, &net.fc3}) fully_shard(*l);
    FSDPModule fsdp = fully_shard(net);
    EXPECT_STREQ(fsdp.process_group().backend(), d.is_cuda() ? "nccl" : world() > 1 ? "mpi" : "local");
    optim::AdamW opt(fsdp.parameters(), {.lr = 1e-2});
    for (int s = 0; s < 3; ++s) {
      Generator gen(50 + uint64_t(s) * 8 + uint64_t(my_rank()));
      Tensor x = randn({6, 8}, DType::f32, &gen).to(d), y = randint(0, 4, {6}, DType::i64, &gen).to(d);
      Tensor loss = cross_entropy(fsdp.forward([&] { return net.forward(x); }), y);
      opt.zero_grad();
      loss.backward();
      fsdp.clip_grad_norm_(0.5);
      opt.step();
    }
    StateDict out;
    for (const auto& [name, v] : fsdp.full_state_dict()) out.insert(name, v.cpu());
    return out;
  };
  EXPECT_LT(max_state_diff(run(Device::cpu()), run(dev)), 1e-5);
}
