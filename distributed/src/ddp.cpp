// DistributedDataParallel (ember/distributed/ddp.h): the consistency check, buckets, the
// gradient hooks and their reduction.
//
// Note [DDP reduction]: one iteration of a bucket's life, between two reductions:
//   hook(i) / unused(i)  -> the parameter's slot in its bucket is filled (gradient or zeros),
//                           its bucket's pending count drops; at zero the bucket is ready;
//   launch_ready()       -> ready buckets start in index order (never out of order: the
//                           collectives must line up across ranks);
//   finalize()           -> after the last launch: wait every bucket (stream-ordered on NCCL:
//                           the host goes on while the reductions run), write the averages
//                           back into .grad() (queued after them), reset the counts for the
//                           next backward.
// `active` is true from the first slot filled to finalize(): a parameter whose slot is filled
// twice while active means the previous backward never completed its reduction.
#include "ember/distributed/ddp.h"

#include <algorithm>
#include <cstring>
#include <unordered_set>

#include "ember/autograd/node.h"
#include "ember/distributed/init.h"
#include "ember/factory.h"
#include "ember/grad_mode.h"

namespace ember::distributed {

namespace {
constexpr const char* kOp = "[DistributedDataParallel]";

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < s.size()) {
    size_t end = s.find('\n', start);
    if (end == std::string::npos) end = s.size();
    out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}
}  // namespace

struct DistributedDataParallel::State {
  struct Bucket {
    std::vector<size_t> params;
    Tensor flat;
    size_t pending = 0;
    WorkPtr work;
  };
  std::shared_ptr<ProcessGroup> group;
  std::vector<std::string> names;
  std::vector<Tensor> params;
  std::vector<size_t> bucket_of;
  std::vector<int64_t> offset_of;  // element offset in its bucket
  std::vector<Bucket> buckets;
  std::vector<char> ready;          // slot filled in this iteration
  std::vector<int32_t> local_used;  // got a gradient on this rank (find_unused_parameters)
  size_t next_launch = 0;
  bool active = false;
  bool require_sync = true;
  bool find_unused = false;
  int64_t reductions = 0;

  Tensor slot(size_t i) const {
    const Bucket& b = buckets[bucket_of[i]];
    return b.flat.narrow(0, offset_of[i], params[i].numel()).view(params[i].sizes());
  }

  std::string not_ready_names() const {
    std::string s;
    for (size_t i = 0; i < params.size(); ++i)
      if (!ready[i]) s += (s.empty() ? "" : ", ") + names[i];
    return s;
  }

  void on_grad_ready(size_t i) {
    if (!require_sync) return;  // no_sync(): accumulate locally
    EMBER_CHECK(!ready[i], distributed::DistributedError, kOp, " rank ", group->rank(), ": parameter '", names[i],
                "' received a gradient again before the previous backward finished its reduction (",
                "parameters without a gradient then: ", not_ready_names(),
                "); pass DDPOptions{.find_unused_parameters = true} when parameters may go unused");
    NoGradGuard no_grad;
    const Tensor& g = params[i].grad();
    Tensor s = slot(i);
    s.copy_(g);
    local_used[i] = 1;
    mark(i);
  }

  void mark_unused(size_t i) {
    NoGradGuard no_grad;
    slot(i).zero_();
    local_used[i] = 0;
    mark(i);
  }

  void mark(size_t i) {
    active = true;
    ready[i] = 1;
    if (--buckets[bucket_of[i]].pending == 0) launch_ready();
  }

  void launch_ready() {
    while (next_launch < buckets.size() && buckets[next_launch].pending == 0) {
      Bucket& b = buckets[next_launch++];
      b.work = group->all_reduce(b.flat, ReduceOp::avg, /*async_op=*/true);
    }
    if (next_launch == buckets.size()) finalize();
  }

  void finalize() {
    for (Bucket& b : buckets) {
      b.work->wait();
      b.work.reset();
    }
    reductions += int64_t(buckets.size());
    std::vector<int32_t> used(params.size(), 1);
    if (find_unused && group->size() > 1) {
      // Globally unused parameters keep an undefined gradient, as in PyTorch.
      Tensor u = tensor(local_used, Shape{int64_t(local_used.size())}).to(group->device());
      group->all_reduce(u, ReduceOp::max);
      used = u.to_vector<int32_t>();
    } else if (find_unused) {
      used = local_used;
    }
    NoGradGuard no_grad;
    for (size_t i = 0; i < params.size(); ++i) {
      if (!used[i]) continue;
      Tensor p = params[i];  // shares the parameter's impl
      if (p.grad().defined()) p.mutable_grad().copy_(slot(i));
      else p.set_grad(slot(i).clone());
    }
    reset();
  }

  void reset() {
    for (Bucket& b : buckets) b.pending = b.params.size();
    std::fill(ready.begin(), ready.end(), 0);
    std::fill(local_used.begin(), local_used.end(), 0);
    next_launch = 0;
    active = false;
  }

  // Throws when the previous backward left buckets unreduced (after finishing the launched
  // ones, which every rank launched alike, so that nothing is left in flight).
  void check_finished(const char* where) {
    if (!active) return;
    const std::string missing = not_ready_names();
    for (Bucket& b : buckets)
      if (b.work) {
        b.work->wait();
        b.work.reset();
      }
    reset();
    throw DistributedError(str(
        kOp, " rank ", group->rank(), ": ", where,
        ": the previous backward did not finish its gradient reduction: these parameters got no "
        "gradient, so their buckets never completed: ", missing,
        ". Pass DDPOptions{.find_unused_parameters = true} if parameters may go unused in a "
        "forward, or make every parameter take part in the loss"));
  }
};

DistributedDataParallel::DistributedDataParallel(nn::Module& module, DDPOptions options,
                                                 std::shared_ptr<ProcessGroup> group)
    : module_(&module), options_(options), state_(std::make_shared<State>()) {
  EMBER_CHECK(options.bucket_cap_mb > 0, ValueError, kOp, " bucket_cap_mb must be positive, got ",
              options.bucket_cap_mb);
  State& s = *state_;
  for (auto& [name, p] : module.named_parameters())
    if (p.requires_grad()) {
      s.names.push_back(name);
      s.params.push_back(p);
    }
  const auto buffers = module.named_buffers();
  Device device = Device::cpu();
  if (!s.params.empty()) device = s.params[0].device();
  for (size_t i = 0; i < s.params.size(); ++i)
    EMBER_CHECK(s.params[i].device() == device, DeviceError, kOp, " parameters must share one device: '",
                s.names[0], "' is on ", device, " but '", s.names[i], "' on ", s.params[i].device());
  if (!group) group = default_group(device);
  group_ = group;
  s.group = group;
  s.find_unused = options.find_unused_parameters;
  const int rank = group->rank(), world = group->size();

  // ---- every rank must hold the same parameters and buffers ----
  std::string descr;
  for (auto& [name, p] : module.named_parameters())
    descr += str("parameter '", name, "' ", p.dtype(), " ", p.sizes(), "\n");
  for (auto& [name, b] : buffers) descr += str("buffer '", name, "' ", b.dtype(), " ", b.sizes(), "\n");
  if (world > 1) {
    const Device gd = group->device();
    Tensor mine = tensor(std::vector<int64_t>{int64_t(fnv1a(descr)), int64_t(descr.size())}, Shape{2}).to(gd);
    Tensor all = zeros({2 * world}, TensorOptions(DType::i64).device(gd));
    group->all_gather(all, mine);
    const std::vector<int64_t> v = all.to_vector<int64_t>();
    bool same = true;
    int64_t longest = 0;
    for (int r = 0; r < world; ++r) {
      same = same && v[2 * r] == v[0];
      longest = std::max(longest, v[2 * r + 1]);
    }
    if (!same) {
      std::vector<uint8_t> bytes(size_t(longest), 0);
      std::memcpy(bytes.data(), descr.data(), descr.size());
      Tensor mine_text = tensor(bytes, Shape{longest}).to(gd);
      Tensor all_text = zeros({longest * world}, TensorOptions(DType::u8).device(gd));
      group->all_gather(all_text, mine_text);
      const std::vector<uint8_t> t = all_text.to_vector<uint8_t>();
      auto text_of = [&](int r) {
        return split_lines(std::string(reinterpret_cast<const char*>(t.data()) + r * longest,
                                       size_t(v[2 * r + 1])));
      };
      const std::vector<std::string> ref = text_of(0);
      for (int r = 1; r < world; ++r) {
        const std::vector<std::string> other = text_of(r);
        for (size_t k = 0; k < std::max(ref.size(), other.size()); ++k) {
          const std::string a = k < ref.size() ? ref[k] : "nothing", b = k < other.size() ? other[k] : "nothing";
          if (a != b)
            throw DistributedError(str(kOp, " rank ", rank, ": the ranks' modules differ: entry ", k,
                                       " is ", a, " on rank 0 but ", b, " on rank ", r,
                                       "; every rank must build the same model"));
        }
      }
      throw DistributedError(str(kOp, " rank ", rank, ": the ranks' module descriptions differ"));
    }
  }

  // ---- rank 0's values everywhere ----
  if (world > 1) {
    NoGradGuard no_grad;
    auto bcast = [&](const Tensor& t) {
      if (t.is_contiguous()) {
        group->broadcast(t, 0);
      } else {
        Tensor c = t.contiguous();
        group->broadcast(c, 0);
        Tensor(t).copy_(c);
      }
    };
    for (auto& [name, p] : module.named_parameters()) bcast(p);
    for (auto& [name, b] : buffers) bcast(b);
  }

  // ---- buckets: reverse registration order, split by dtype and capacity ----
  const double cap = options.bucket_cap_mb * 1024.0 * 1024.0;
  s.bucket_of.assign(s.params.size(), 0);
  s.offset_of.assign(s.params.size(), 0);
  std::vector<std::vector<size_t>> groups;
  double bytes = 0;
  for (size_t k = s.params.size(); k-- > 0;) {
    const Tensor& p = s.params[k];
    if (groups.empty() || bytes >= cap || s.params[groups.back().front()].dtype() != p.dtype()) {
      groups.emplace_back();
      bytes = 0;
    }
    groups.back().push_back(k);
    bytes += double(p.numel()) * double(p.element_size());
  }
  for (auto& members : groups) {
    State::Bucket b;
    int64_t n = 0;
    for (size_t i : members) {
      s.bucket_of[i] = s.buckets.size();
      s.offset_of[i] = n;
      n += s.params[i].numel();
    }
    b.params = members;
    b.pending = members.size();
    b.flat = zeros({n}, TensorOptions(s.params[members.front()].dtype()).device(device));
    s.buckets.push_back(std::move(b));
  }
  s.ready.assign(s.params.size(), 0);
  s.local_used.assign(s.params.size(), 0);

  // ---- hooks: they hold a weak_ptr, so they are harmless after this object is gone ----
  std::weak_ptr<State> weak = state_;
  for (size_t i = 0; i < s.params.size(); ++i)
    s.params[i].register_post_accumulate_grad_hook([weak, i](const Tensor&) {
      if (auto st = weak.lock()) st->on_grad_ready(i);
    });
}

DistributedDataParallel::~DistributedDataParallel() {
  // Never leave a collective in flight on tensors this object owns (best effort: no throw).
  for (auto& b : state_->buckets)
    if (b.work) try {
        b.work->wait();
      } catch (...) {
      }
}

void DistributedDataParallel::pre_forward() {
  state_->check_finished("forward");
  if (options_.broadcast_buffers && group_->size() > 1) {
    NoGradGuard no_grad;
    for (auto& [name, b] : module_->named_buffers()) {
      if (b.is_contiguous()) {
        group_->broadcast(b, 0);
      } else {
        Tensor c = b.contiguous();
        group_->broadcast(c, 0);
        Tensor(b).copy_(c);
      }
    }
  }
}

void DistributedDataParallel::prepare_for_backward(const TensorList& outputs) {
  State& s = *state_;
  if (!s.find_unused || !s.require_sync) return;
  // Every leaf the outputs' graph reaches (through AccumulateGrad nodes).
  std::unordered_set<const TensorImpl*> reached;
  std::unordered_set<const autograd::Node*> seen;
  std::vector<autograd::Node*> stack;
  for (const Tensor& t : outputs) {
    if (!t.defined()) continue;
    if (t.grad_fn()) {
      if (seen.insert(t.grad_fn().get()).second) stack.push_back(t.grad_fn().get());
    } else if (t.requires_grad()) {
      reached.insert(t.impl());
    }
  }
  while (!stack.empty()) {
    autograd::Node* n = stack.back();
    stack.pop_back();
    if (auto* acc = dynamic_cast<autograd::AccumulateGrad*>(n)) reached.insert(acc->leaf().impl());
    for (auto& e : n->next_edges)
      if (e && seen.insert(e.get()).second) stack.push_back(e.get());
  }
  for (size_t i = 0; i < s.params.size(); ++i)
    if (!s.ready[i] && !reached.count(s.params[i].impl())) s.mark_unused(i);
}

void DistributedDataParallel::finish_gradient_synchronization() {
  state_->check_finished("finish_gradient_synchronization");
}

DistributedDataParallel::NoSyncGuard::NoSyncGuard(DistributedDataParallel& ddp)
    : ddp_(ddp), prev_(ddp.state_->require_sync) {
  ddp_.state_->require_sync = false;
}
DistributedDataParallel::NoSyncGuard::~NoSyncGuard() { ddp_.state_->require_sync = prev_; }

std::vector<std::vector<size_t>> DistributedDataParallel::bucket_assignment() const {
  std::vector<std::vector<size_t>> out;
  for (const auto& b : state_->buckets) out.push_back(b.params);
  return out;
}

int64_t DistributedDataParallel::num_reductions() const { return state_->reductions; }

}  // namespace ember::distributed
