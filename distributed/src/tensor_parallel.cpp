// Tensor parallelism (ember/distributed/tensor_parallel.h): Megatron's mappings as autograd
// ops, the parallel layers, the vocab-parallel loss, and GPT's blocks split by heads.
#include "ember/distributed/tensor_parallel.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "ember/autograd/function.h"
#include "ember/distributed/fsdp.h"
#include "ember/distributed/init.h"
#include "ember/factory.h"
#include "ember/functions.h"
#include "ember/grad_mode.h"

namespace ember::distributed {

namespace {

int64_t split_size(const char* layer, const char* what, int64_t n, const ProcessGroup& g) {
  EMBER_CHECK(n % g.size() == 0, ValueError, "[", layer, "] ", what, " ", n, " does not divide over the ", g.size(),
              " ranks of group '", g.name(), "'");
  return n / g.size();
}

std::shared_ptr<ProcessGroup> checked(std::shared_ptr<ProcessGroup> g, const char* layer) {
  EMBER_CHECK(g != nullptr, ValueError, "[", layer, "] needs a process group (this rank is not in it)");
  return g;
}

// A contiguous copy of `x` detached from the graph (what a collective may write into).
Tensor buffer_of(const Tensor& x) {
  NoGradGuard no_grad;
  return x.detach().contiguous().clone();
}

}  // namespace

Tensor copy_to_tensor_parallel(const Tensor& x, const std::shared_ptr<ProcessGroup>& group) {
  return autograd::record("copy_to_tensor_parallel", x.detach(), {x}, [group](const Tensor& g) -> TensorList {
    Tensor sum = buffer_of(g);
    group->all_reduce(sum, ReduceOp::sum);
    return {sum};
  });
}

Tensor reduce_from_tensor_parallel(const Tensor& x, const std::shared_ptr<ProcessGroup>& group) {
  Tensor sum = buffer_of(x);
  group->all_reduce(sum, ReduceOp::sum);
  return autograd::record("reduce_from_tensor_parallel", sum, {x}, [](const Tensor& g) -> TensorList { return {g}; });
}

Tensor gather_from_tensor_parallel(const Tensor& x, const std::shared_ptr<ProcessGroup>& group) {
  const int P = group->size();
  const int64_t d = x.sizes()[x.dim() - 1];
  Tensor gathered = empty({int64_t(P) * x.numel()}, TensorOptions(x.device()).dtype(x.dtype()));
  group->all_gather(gathered, buffer_of(x));
  // [P, ..., d] -> [..., P, d] -> [..., P d]
  Shape parts{int64_t(P)};
  for (int64_t i = 0; i < x.dim(); ++i) parts.push_back(x.sizes()[i]);
  Shape order{};
  for (int64_t i = 1; i < x.dim(); ++i) order.push_back(i);
  order.push_back(0);
  order.push_back(x.dim());
  Shape out_shape = x.sizes();
  out_shape[out_shape.size() - 1] = d * P;
  Tensor out;
  {
    NoGradGuard no_grad;
    out = gathered.view(parts).permute(order).contiguous().view(out_shape);
  }
  const int64_t start = int64_t(group->rank()) * d;
  return autograd::record("gather_from_tensor_parallel", out, {x}, [start, d](const Tensor& g) -> TensorList {
    return {g.narrow(g.dim() - 1, start, d).contiguous()};
  });
}

// ---- ColumnParallelLinear ----

ColumnParallelLinear::ColumnParallelLinear(int64_t in, int64_t out, std::shared_ptr<ProcessGroup> g,
                                           ColumnParallelOptions o)
    : in_features(in), out_features(out), options(o), group(checked(std::move(g), "ColumnParallelLinear")) {
  const int64_t local = split_size("ColumnParallelLinear", "out_features", out, *group);
  // The slice of the layer nn::Linear(in, out) would draw: with one seed on every rank, the
  // parallel layer is its unsharded twin.
  nn::Linear full(in, out, o.bias);
  NoGradGuard no_grad;
  const int64_t start = int64_t(group->rank()) * local;
  weight = register_parameter("weight", full.weight.narrow(0, start, local).clone());
  if (o.bias) bias = register_parameter("bias", full.bias.narrow(0, start, local).clone());
}

std::shared_ptr<ColumnParallelLinear> ColumnParallelLinear::from(const nn::Linear& full,
                                                                 std::shared_ptr<ProcessGroup> group,
                                                                 ColumnParallelOptions options) {
  options.bias = full.bias.defined();
  auto layer = std::make_shared<ColumnParallelLinear>(full.in_features, full.out_features, group, options);
  layer->to(full.weight.device(), full.weight.dtype());
  NoGradGuard no_grad;
  const int64_t local = layer->weight.sizes()[0], start = int64_t(layer->group->rank()) * local;
  layer->weight.copy_(full.weight.narrow(0, start, local));
  if (options.bias) layer->bias.copy_(full.bias.narrow(0, start, local));
  return layer;
}

Tensor ColumnParallelLinear::forward(const Tensor& x) const {
  Tensor y = linear(copy_to_tensor_parallel(x, group), weight, bias);
  return options.gather_output ? gather_from_tensor_parallel(y, group) : y;
}

std::string ColumnParallelLinear::extra_repr() const {
  return str("in_features=", in_features, ", out_features=", out_features, ", bias=", bias.defined() ? "True" : "False",
             ", group=", group->name(), " (", group->size(), " ranks)");
}

// ---- RowParallelLinear ----

RowParallelLinear::RowParallelLinear(int64_t in, int64_t out, std::shared_ptr<ProcessGroup> g, RowParallelOptions o)
    : in_features(in), out_features(out), options(o), group(checked(std::move(g), "RowParallelLinear")) {
  const int64_t local = split_size("RowParallelLinear", "in_features", in, *group);
  nn::Linear full(in, out, o.bias);
  NoGradGuard no_grad;
  weight = register_parameter("weight", full.weight.narrow(1, int64_t(group->rank()) * local, local).contiguous().clone());
  if (o.bias) bias = register_parameter("bias", full.bias.clone());
}

std::shared_ptr<RowParallelLinear> RowParallelLinear::from(const nn::Linear& full, std::shared_ptr<ProcessGroup> group,
                                                           RowParallelOptions options) {
  options.bias = full.bias.defined();
  auto layer = std::make_shared<RowParallelLinear>(full.in_features, full.out_features, group, options);
  layer->to(full.weight.device(), full.weight.dtype());
  NoGradGuard no_grad;
  const int64_t local = layer->weight.sizes()[1];
  layer->weight.copy_(full.weight.narrow(1, int64_t(layer->group->rank()) * local, local));
  if (options.bias) layer->bias.copy_(full.bias);
  return layer;
}

Tensor RowParallelLinear::forward(const Tensor& x) const {
  Tensor in = x;
  if (!options.input_is_parallel) {
    const int64_t local = weight.sizes()[1];
    in = x.narrow(x.dim() - 1, int64_t(group->rank()) * local, local);
  }
  // The partial products summed over the group, then the bias once.
  Tensor y = reduce_from_tensor_parallel(linear(in, weight), group);
  return bias.defined() ? y + bias : y;
}

std::string RowParallelLinear::extra_repr() const {
  return str("in_features=", in_features, ", out_features=", out_features, ", bias=", bias.defined() ? "True" : "False",
             ", group=", group->name(), " (", group->size(), " ranks)");
}

// ---- VocabParallelEmbedding ----

VocabParallelEmbedding::VocabParallelEmbedding(int64_t num, int64_t dim, std::shared_ptr<ProcessGroup> g)
    : num_embeddings(num), embedding_dim(dim), group(checked(std::move(g), "VocabParallelEmbedding")) {
  const int64_t local = split_size("VocabParallelEmbedding", "num_embeddings", num, *group);
  vocab_start = int64_t(group->rank()) * local;
  nn::Embedding full(num, dim);
  NoGradGuard no_grad;
  weight = register_parameter("weight", full.weight.narrow(0, vocab_start, local).clone());
}

std::shared_ptr<VocabParallelEmbedding> VocabParallelEmbedding::from(const nn::Embedding& full,
                                                                     std::shared_ptr<ProcessGroup> group) {
  auto layer = std::make_shared<VocabParallelEmbedding>(full.num_embeddings, full.embedding_dim, group);
  layer->to(full.weight.device(), full.weight.dtype());
  NoGradGuard no_grad;
  layer->weight.copy_(full.weight.narrow(0, layer->vocab_start, layer->weight.sizes()[0]));
  return layer;
}

Tensor VocabParallelEmbedding::forward(const Tensor& ids) const {
  const int64_t local = weight.sizes()[0];
  // Ids of other ranks' rows look up row 0 and are zeroed; the sum over the group is the table's.
  Tensor mine = (ids >= vocab_start) & (ids < vocab_start + local);
  Tensor local_ids = where(mine, ids - vocab_start, Scalar(int64_t(0)));
  Tensor rows = embedding(weight, local_ids) * mine.unsqueeze(-1).to(weight.dtype());
  return reduce_from_tensor_parallel(rows, group);
}

std::string VocabParallelEmbedding::extra_repr() const {
  return str(num_embeddings, ", ", embedding_dim, ", rows [", vocab_start, ", ", vocab_start + weight.sizes()[0],
             "), group=", group->name());
}

// ---- vocab-parallel cross-entropy ----

// loss_i = log(sum_j exp(z_ij - m_i)) + m_i - z_i,t_i with m_i = max_j z_ij, each sum and max
// over the whole vocabulary by one all-reduce of [N]; the gradient (softmax - onehot) / kept
// rows, on this rank's columns only.
Tensor vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& target,
                                    const std::shared_ptr<ProcessGroup>& group, int64_t ignore_index,
                                    int64_t num_classes) {
  constexpr const char* op = "[vocab_parallel_cross_entropy]";
  EMBER_CHECK(logits.dim() == 2 && target.dim() == 1 && target.sizes()[0] == logits.sizes()[0], ShapeError, op,
              " expects logits [N, V/P] and target [N], got ", logits.sizes(), " and ", target.sizes());
  EMBER_CHECK(is_integral(target.dtype()), DTypeError, op, " target must hold integer ids, got ", target.dtype());
  const int64_t N = logits.sizes()[0], local = logits.sizes()[1];
  const int64_t start = int64_t(group->rank()) * local;
  const int64_t V = num_classes >= 0 ? num_classes : local * group->size();
  Tensor softmax, loss;
  {
    NoGradGuard no_grad;
    Tensor z = logits.detach().to(DType::f32);
    if (num_classes >= 0 && start + local > num_classes) {  // padded columns: no probability
      const Tensor cls = arange(start, start + local, 1, TensorOptions(z.device()).dtype(DType::i64)) < num_classes;
      z = where(cls.unsqueeze(0), z, Scalar(-std::numeric_limits<double>::infinity()));
    }
    Tensor m = amax(z, {1}).contiguous();
    group->all_reduce(m, ReduceOp::max);
    const Tensor e = (z - m.unsqueeze(1)).exp();
    Tensor s = e.sum({1}).contiguous();
    group->all_reduce(s, ReduceOp::sum);
    const Tensor t = target.to(DType::i64);
    const Tensor kept = t != ignore_index;
    // Checked on the CPU only: on a GPU reading the answer would stop the host in every step.
    if (t.is_cpu())
      EMBER_CHECK(!(kept & ((t < 0) | (t >= V))).any().item<bool>(), ValueError, op, " a target is outside [0, ", V,
                  ") (and not ignore_index ", ignore_index, ")");
    const Tensor mine = kept & (t >= start) & (t < start + local);
    const Tensor col = where(mine, t - start, Scalar(int64_t(0))).unsqueeze(1);
    Tensor picked = (z.gather(1, col).squeeze(1) * mine.to(DType::f32)).contiguous();
    group->all_reduce(picked, ReduceOp::sum);
    const Tensor count = kept.to(DType::f32).sum().clamp_min(1.0);
    loss = ((s.log() + m - picked) * kept.to(DType::f32)).sum() / count;
    // The gradient's pieces, ready for the VJP: (softmax - onehot) * kept / count.
    Tensor onehot = zeros({N, local}, TensorOptions(z.device()));
    onehot = onehot.scatter_add(1, col, mine.to(DType::f32).unsqueeze(1));
    softmax = (e / s.unsqueeze(1) - onehot) * (kept.to(DType::f32) / count).unsqueeze(1);
  }
  loss = loss.to(logits.dtype());
  return autograd::record("vocab_parallel_cross_entropy", loss, {logits},
                          [softmax](const Tensor& g) -> TensorList { return {softmax * g.to(DType::f32)}; });
}

// ---- GPT ----

void tensor_parallelize(nn::GPT& model, const std::shared_ptr<ProcessGroup>& group_in) {
  constexpr const char* op = "tensor_parallelize";
  std::shared_ptr<ProcessGroup> group = checked(group_in, op);
  const int64_t P = group->size(), p = group->rank();
  const nn::GPTConfig& c = model.config;
  EMBER_CHECK(c.dropout == 0, ValueError, "[", op, "] needs dropout 0 (a mask on each rank's partial sums is not ",
              "a mask on their total); this GPT has ", c.dropout);
  EMBER_CHECK(!model.head.logits && !model.head.loss && !model.wte.has_forward_hooks(), ValueError, "[", op,
              "] this GPT's head is replaced already (tensor_parallelize twice?)");
  split_size(op, "n_head", c.n_head, *group);
  const int64_t C = c.n_embd, Cp = split_size(op, "n_embd", C, *group), Hp = split_size(op, "4 n_embd", 4 * C, *group);
  const int64_t Vp = split_size(op, "padded_vocab_size", c.padded_vocab_size, *group), vstart = p * Vp;
  NoGradGuard no_grad;
  // The vocabulary: this rank's rows of wte. The lookup reads them for the ids they hold (row 0
  // for the others, zeroed) and sums over the group; the pre-hook hands the mask to the hook.
  model.wte.weight.set_data(model.wte.weight.narrow(0, vstart, Vp).contiguous());
  model.wte.num_embeddings = Vp;
  auto mask = std::make_shared<Tensor>();
  model.wte.register_forward_pre_hook([mask, vstart, Vp](const nn::Module&, const Tensor& ids) {
    *mask = (ids >= vstart) & (ids < vstart + Vp);
    return where(*mask, ids - vstart, Scalar(int64_t(0)));
  });
  model.wte.register_forward_hook([mask, group](const nn::Module&, const Tensor& rows) {
    Tensor out = reduce_from_tensor_parallel(rows * mask->unsqueeze(-1).to(rows.dtype()), group);
    *mask = Tensor();
    return out;
  });
  const Tensor wte = model.wte.weight;  // the handle: fully_shard's set_data keeps it
  const int64_t V = c.vocab_size;
  model.head.logits = [wte, group](const Tensor& h) {
    return gather_from_tensor_parallel(linear(copy_to_tensor_parallel(h, group), wte), group);
  };
  model.head.loss = [wte, group, V](const Tensor& h, const Tensor& targets) {
    return vocab_parallel_cross_entropy(linear(copy_to_tensor_parallel(h, group), wte), targets, group,
                                        /*ignore_index=*/-1, /*num_classes=*/V);
  };
  for (auto& b : model.blocks) {
    EMBER_CHECK(!b->attn.has_forward_hooks() && !b->mlp.has_forward_hooks(), ValueError, "[", op,
                "] the blocks already have hooks (tensor_parallelize twice, or after fully_shard)");
    nn::Linear& qkv = b->attn.c_attn;
    // q, k and v rows of this rank's heads: heads are Cp-row slices of each of the three.
    TensorList w, bias;
    for (int64_t part = 0; part < 3; ++part) {
      w.push_back(qkv.weight.narrow(0, part * C + p * Cp, Cp));
      bias.push_back(qkv.bias.narrow(0, part * C + p * Cp, Cp));
    }
    qkv.weight.set_data(cat(w, 0).contiguous());
    qkv.bias.set_data(cat(bias, 0).contiguous());
    qkv.out_features = 3 * Cp;
    nn::Linear& proj = b->attn.c_proj;
    proj.weight.set_data(proj.weight.narrow(1, p * Cp, Cp).contiguous());
    proj.in_features = Cp;
    b->attn.n_head = c.n_head / P;
    b->attn.n_embd = Cp;
    nn::Linear& fc = b->mlp.c_fc;
    fc.weight.set_data(fc.weight.narrow(0, p * Hp, Hp).contiguous());
    fc.bias.set_data(fc.bias.narrow(0, p * Hp, Hp).contiguous());
    fc.out_features = Hp;
    nn::Linear& down = b->mlp.c_proj;
    down.weight.set_data(down.weight.narrow(1, p * Hp, Hp).contiguous());
    down.in_features = Hp;
    // Input: replicated, its gradient summed over the group. Output: the partial sums
    // (each with the whole bias, which the layer adds) summed, the bias counted once.
    for (nn::Module* m : {static_cast<nn::Module*>(&b->attn), static_cast<nn::Module*>(&b->mlp)}) {
      const Tensor whole_bias = m == &b->attn ? proj.bias : down.bias;
      m->register_forward_pre_hook(
          [group](const nn::Module&, const Tensor& in) { return copy_to_tensor_parallel(in, group); });
      m->register_forward_hook([group, whole_bias](const nn::Module&, const Tensor& out) {
        return reduce_from_tensor_parallel(out - whole_bias, group) + whole_bias;
      });
    }
  }
}

void tensor_parallelize(nn::Llama& model, const std::shared_ptr<ProcessGroup>& group_in) {
  constexpr const char* op = "tensor_parallelize";
  std::shared_ptr<ProcessGroup> group = checked(group_in, op);
  const int64_t P = group->size(), p = group->rank();
  const nn::LlamaConfig& c = model.config;
  split_size(op, "n_head", c.n_head, *group);
  split_size(op, "n_kv_head", c.n_kv_head, *group);
  split_size(op, "intermediate_size", c.intermediate_size, *group);
  NoGradGuard no_grad;
  auto rows = [&](nn::Linear& l) {
    const int64_t n = l.out_features / P;
    l.weight.set_data(l.weight.narrow(0, p * n, n).contiguous());
    l.out_features = n;
  };
  auto cols = [&](nn::Linear& l) {
    const int64_t n = l.in_features / P;
    l.weight.set_data(l.weight.narrow(1, p * n, n).contiguous());
    l.in_features = n;
  };
  for (auto& b : model.blocks) {
    EMBER_CHECK(!b->self_attn.has_forward_hooks() && !b->mlp.has_forward_hooks(), ValueError, "[", op,
                "] the blocks already have hooks (tensor_parallelize twice, or after fully_shard)");
    rows(b->self_attn.q_proj);  // heads are head_dim-row slices, this rank's contiguous
    rows(b->self_attn.k_proj);
    rows(b->self_attn.v_proj);
    cols(b->self_attn.o_proj);
    b->self_attn.n_head = c.n_head / P;
    b->self_attn.n_kv_head = c.n_kv_head / P;
    rows(b->mlp.gate_proj);
    rows(b->mlp.up_proj);
    cols(b->mlp.down_proj);
    for (nn::Module* m : {static_cast<nn::Module*>(&b->self_attn), static_cast<nn::Module*>(&b->mlp)}) {
      m->register_forward_pre_hook(
          [group](const nn::Module&, const Tensor& in) { return copy_to_tensor_parallel(in, group); });
      m->register_forward_hook(
          [group](const nn::Module&, const Tensor& out) { return reduce_from_tensor_parallel(out, group); });
    }
  }
}

Tensor clip_grad_norm_tensor_parallel(const nn::CausalLM& model, const std::shared_ptr<ProcessGroup>& group,
                                      double max_norm, const FSDPModule* fsdp) {
  std::vector<const TensorImpl*> split;
  if (const auto* gpt = dynamic_cast<const nn::GPT*>(&model)) {
    split.push_back(gpt->wte.weight.impl());
    for (const auto& b : gpt->blocks)
      for (const Tensor* t : {&b->attn.c_attn.weight, &b->attn.c_attn.bias, &b->attn.c_proj.weight,
                              &b->mlp.c_fc.weight, &b->mlp.c_fc.bias, &b->mlp.c_proj.weight})
        split.push_back(t->impl());
  }
  if (const auto* llama = dynamic_cast<const nn::Llama*>(&model))
    for (const auto& b : llama->blocks)
      for (const nn::Linear* l : {&b->self_attn.q_proj, &b->self_attn.k_proj, &b->self_attn.v_proj,
                                  &b->self_attn.o_proj, &b->mlp.gate_proj, &b->mlp.up_proj, &b->mlp.down_proj})
        split.push_back(l->weight.impl());
  NoGradGuard no_grad;
  const double P = double(group->size());
  std::vector<Tensor> grads;
  Tensor sum = zeros({1}, TensorOptions(model.parameters().at(0).device()).dtype(DType::f64));
  for (const Tensor& p : model.parameters()) {
    const Tensor holder = fsdp ? fsdp->shard_of(p) : p;
    if (!holder.defined() || !holder.grad().defined()) continue;
    const Tensor& g = holder.grad();
    grads.push_back(g);
    const bool is_split = std::find(split.begin(), split.end(), p.impl()) != split.end();
    const Tensor sq = g.to(DType::f64).pow(2.0).sum().reshape({1});
    sum = sum + (is_split ? sq : sq / P);
  }
  group->all_reduce(sum, ReduceOp::sum);
  if (fsdp) fsdp->process_group().all_reduce(sum, ReduceOp::sum);
  const Tensor total = sum.sqrt();
  const Tensor coef = (max_norm / (total + 1e-6)).clamp_max(1.0);
  for (const Tensor& g : grads) Tensor(g).mul_(coef.to(g.dtype()));
  return total.reshape({}).to(DType::f32);
}

}  // namespace ember::distributed
