// fully_shard (ember/distributed/fsdp.h): units, their gathers and reduce-scatters, and the
// hooks that drive them.
//
// Note [FSDP iteration]: the life of one iteration, as the state machine below runs it:
//   forward(fn)        -> begin(): the previous iteration must be complete (or never have
//                         started its backward); the root unit is gathered;
//   pre_forward(u)     -> u gathered (waiting for a prefetch), the next unit of the previous
//                         iteration's order prefetched; u recorded in this iteration's order;
//   post_forward(u, y) -> u freed (not the root), a hook on y's gradient: pre_backward(u);
//   pre_backward(u)    -> phase backward; u gathered, the unit before it prefetched;
//   on_grad(u, i)      -> the last gradient of u: post_backward(u): u freed, its gradients
//                         flattened and reduce-scattered (async); the last unit: finish();
//   finish()           -> wait every reduction, add the slices into the pieces' .grad(),
//                         reset for the next iteration.
// A unit that a checkpointed forward recomputes in backward meets pre_forward in the
// backward phase: it is gathered and nothing else happens.
#include "ember/distributed/fsdp.h"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "agree.h"
#include "ember/distributed/init.h"
#include "ember/factory.h"
#include "ember/grad_mode.h"

namespace ember::distributed {

namespace detail {

namespace {
constexpr const char* kOp = "[fully_shard]";
}  // namespace

struct FsdpUnit {
  nn::Module* module = nullptr;
  std::vector<Tensor> params;  // the module's own handles: views of `flat`
  std::vector<int64_t> offsets;
  std::vector<char> trainable;
  size_t n_trainable = 0;
  int64_t numel = 0, shard_numel = 0;
  DType orig_dtype = DType::f32, compute_dtype = DType::f32, reduce_dtype = DType::f32;
  bool reshard_after_forward = true;
  Tensor flat;                 // [W * S], compute dtype: the unsharded parameters' storage
  Tensor shard;                // [S], original dtype: this rank's elements
  std::vector<Tensor> pieces;  // per parameter: its elements in `shard` (undefined: none)
  std::vector<int64_t> piece_start;
  // gathering
  bool gathered = false;
  WorkPtr gather_work;
  Tensor gather_src;
  // one iteration
  bool ran_forward = false, pre_backward_done = false, backward_done = false;
  size_t grads_seen = 0;
  WorkPtr reduce_work;
  Tensor reduce_out;

  int64_t flat_bytes() const { return flat.numel() * int64_t(flat.element_size()); }
};

struct FsdpUnitRef {
  std::shared_ptr<FsdpState> state;
  FsdpUnit* unit = nullptr;
};

struct FsdpState {
  std::shared_ptr<ProcessGroup> group;
  std::vector<std::unique_ptr<FsdpUnit>> units;  // creation order; the last one is the root
  std::vector<std::weak_ptr<FsdpUnitRef>> refs;
  enum class Phase { idle, forward, backward } phase = Phase::idle;
  bool expecting_backward = false;
  bool require_sync = true;
  int summoned = 0;
  size_t pending = 0;
  std::vector<FsdpUnit*> order, last_order;
  int64_t gathered_now = 0, gathered_peak = 0;

  FsdpUnit* root() const { return units.back().get(); }

  std::string where(const char* op) const { return group->where(op); }

  // ---- gathering ----
  void unshard_async(FsdpUnit& u) {
    if (u.gathered || u.gather_work) return;
    NoGradGuard no_grad;
    u.flat.storage()->reallocate();
    gathered_now += u.flat_bytes();
    gathered_peak = std::max(gathered_peak, gathered_now);
    u.gather_src = u.compute_dtype == u.orig_dtype ? u.shard : u.shard.to(u.compute_dtype);
    u.gather_work = group->all_gather(u.flat, u.gather_src, /*async_op=*/true);
  }
  void unshard(FsdpUnit& u) {
    unshard_async(u);
    if (u.gather_work) {
      WorkPtr w = std::move(u.gather_work);
      u.gather_work = nullptr;
      w->wait();
      u.gathered = true;
      u.gather_src = Tensor();
    }
  }
  void reshard(FsdpUnit& u) {
    if (summoned > 0) return;  // summon_full_params keeps everything gathered
    if (u.gather_work) {
      WorkPtr w = std::move(u.gather_work);
      u.gather_work = nullptr;
      w->wait();  // the memory must not go while the gather writes it
    } else if (!u.gathered) {
      return;
    }
    u.gathered = false;
    u.gather_src = Tensor();
    u.flat.storage()->release_memory();
    gathered_now -= u.flat_bytes();
  }
  void reshard_all() {
    for (auto& u : units) reshard(*u);
  }

  // ---- the hooks (Note [FSDP iteration]) ----
  void pre_forward(FsdpUnit& u) {
    if (summoned > 0) return;  // everything is gathered, nothing is an iteration
    if (phase == Phase::backward) {  // recomputed by activation checkpointing
      unshard(u);
      return;
    }
    phase = Phase::forward;
    if (!u.ran_forward) {
      u.ran_forward = true;
      order.push_back(&u);
    }
    unshard(u);
    const auto it = std::find(last_order.begin(), last_order.end(), &u);
    if (it != last_order.end() && it + 1 != last_order.end()) unshard_async(**(it + 1));
  }

  void post_forward(const std::shared_ptr<FsdpUnitRef>& ref, const Tensor& out) {
    FsdpUnit& u = *ref->unit;
    if (summoned > 0 || phase == Phase::backward) return;
    if (&u != root() && u.reshard_after_forward) reshard(u);
    if (out.defined() && out.requires_grad() && GradMode::is_enabled()) {
      std::weak_ptr<FsdpUnitRef> weak = ref;
      out.register_hook([weak](const Tensor&) -> Tensor {
        if (auto r = weak.lock()) r->state->pre_backward(*r->unit);
        return Tensor();
      });
    }
  }

  void pre_backward(FsdpUnit& u) {
    if (!expecting_backward) return;
    phase = Phase::backward;
    if (u.pre_backward_done) return;
    u.pre_backward_done = true;
    unshard(u);
    const auto it = std::find(order.begin(), order.end(), &u);
    if (it != order.end() && it != order.begin() && !(*(it - 1))->backward_done) unshard_async(**(it - 1));
  }

  void on_grad(FsdpUnit& u, size_t i) {
    if (!expecting_backward || !u.trainable[i]) return;  // a backward outside forward()
    phase = Phase::backward;
    if (++u.grads_seen == u.n_trainable) post_backward(u);
  }

  void post_backward(FsdpUnit& u) {
    u.backward_done = true;
    reshard(u);
    if (require_sync) {
      NoGradGuard no_grad;
      Tensor flat_grad = zeros({u.flat.numel()}, TensorOptions(u.flat.device()).dtype(u.reduce_dtype));
      for (size_t i = 0; i < u.params.size(); ++i) {
        const Tensor& g = u.params[i].grad();
        if (!u.trainable[i] || !g.defined()) continue;
        flat_grad.narrow(0, u.offsets[i], g.numel()).copy_(g.reshape({-1}));
        u.params[i].set_grad(Tensor());
      }
      u.reduce_out = empty({u.shard_numel}, TensorOptions(u.flat.device()).dtype(u.reduce_dtype));
      u.reduce_work = group->reduce_scatter(u.reduce_out, flat_grad, ReduceOp::avg, /*async_op=*/true);
    }
    if (--pending == 0) finish();
  }

  // The last unit's reduction started: wait for all, hand the slices to the pieces.
  void finish() {
    NoGradGuard no_grad;
    for (auto& up : units) {
      FsdpUnit& u = *up;
      if (!u.reduce_work) continue;
      u.reduce_work->wait();
      u.reduce_work = nullptr;
      const Tensor grad = u.reduce_out.to(u.orig_dtype);
      u.reduce_out = Tensor();
      for (size_t i = 0; i < u.pieces.size(); ++i) {
        Tensor& piece = u.pieces[i];
        if (!piece.defined() || !u.trainable[i]) continue;
        const Tensor slice = grad.narrow(0, u.piece_start[i], piece.numel());
        if (piece.grad().defined()) piece.mutable_grad().add_(slice);
        else piece.set_grad(slice);
      }
    }
    // A unit prefetched from the last iteration's order that this one never ran (the model's
    // path changed) goes too: every rank decides alike, by the same order.
    for (auto& u : units)
      if (!u->ran_forward && u.get() != root()) reshard(*u);
    reset();
  }

  void reset() {
    for (auto& u : units) {
      u->ran_forward = u->pre_backward_done = u->backward_done = false;
      u->grads_seen = 0;
    }
    if (!order.empty()) last_order = order;
    order.clear();
    phase = Phase::idle;
    expecting_backward = false;
    pending = 0;
  }

  // The names of trainable parameters of units whose backward did not complete.
  std::string missing_gradients() const {
    std::unordered_map<const TensorImpl*, std::string> names;
    for (const auto& [name, t] : root()->module->named_parameters()) names.emplace(t.impl(), name);
    std::string s;
    for (const auto& u : units) {
      if (!u->ran_forward || u->backward_done) continue;
      for (size_t i = 0; i < u->params.size(); ++i)
        if (u->trainable[i] && !u->params[i].grad().defined())
          s += (s.empty() ? "" : ", ") + names[u->params[i].impl()];
    }
    return s;
  }

  void check_complete(const char* op) {
    if (!expecting_backward) return;
    bool started = phase == Phase::backward;
    for (const auto& u : units) started |= u->grads_seen > 0 || u->pre_backward_done;
    if (started) {
      throw DistributedError(str(where(op), ": the previous backward did not complete its gradient reduction: ",
                                 "parameters without a gradient: ", missing_gradients(),
                                 " (every parameter of a unit that ran forward must receive a gradient)"));
    }
    // forward() without backward (a loss only logged): nothing to reduce.
    for (auto& u : units)
      for (Tensor& p : u->params) p.set_grad(Tensor());
    reset();
  }

  Tensor forward(const std::shared_ptr<FsdpUnitRef>& ref, const std::function<Tensor()>& fn) {
    EMBER_CHECK(ref->unit == root(), ValueError, where("FSDPModule::forward"),
                ": this unit is inside another (fully_shard was called on a module above it); call "
                "the outermost FSDPModule's forward");
    EMBER_CHECK(summoned == 0, ValueError, where("FSDPModule::forward"),
                ": inside summon_full_params (the parameters are gathered for reading; train outside it)");
    check_complete("FSDPModule::forward");
    Tensor out;
    try {
      pre_forward(*root());
      out = fn();
      post_forward(ref, out);
    } catch (...) {
      reset();
      reshard_all();
      throw;
    }
    if (out.defined() && out.requires_grad() && GradMode::is_enabled()) {
      expecting_backward = true;
      for (const auto& u : units) pending += u->ran_forward && u->n_trainable > 0;
    }
    if (!expecting_backward || pending == 0) {  // nothing will come back: free everything now
      reset();
      reshard_all();
    }
    return out;
  }
};

namespace {
// Every module that is a unit, to the ref its hooks hold: how fully_shard finds the units
// below a module.
std::mutex g_registry_mu;
std::unordered_map<const nn::Module*, std::weak_ptr<FsdpUnitRef>> g_registry;

std::shared_ptr<FsdpUnitRef> unit_of(const nn::Module* m) {
  std::lock_guard lock(g_registry_mu);
  auto it = g_registry.find(m);
  if (it == g_registry.end()) return nullptr;
  auto ref = it->second.lock();
  if (!ref) g_registry.erase(it);
  return ref;
}
}  // namespace

}  // namespace detail

using detail::FsdpState;
using detail::FsdpUnit;
using detail::FsdpUnitRef;

FSDPModule fully_shard(nn::Module& module, FSDPOptions options) {
  constexpr const char* kOp = "[fully_shard]";
  EMBER_CHECK(!detail::unit_of(&module), ValueError, kOp, " ", module.type_name(),
              " is already a unit (fully_shard was called on it before)");
  // The units below this module, and the parameters they hold.
  std::vector<std::shared_ptr<FsdpUnitRef>> below;
  std::unordered_set<const TensorImpl*> claimed;
  for (const auto& [name, m] : module.named_modules()) {
    if (m == &module) continue;
    if (auto ref = detail::unit_of(m)) {
      below.push_back(ref);
      for (const Tensor& p : ref->unit->params) claimed.insert(p.impl());
    }
  }
  std::vector<std::pair<std::string, Tensor>> mine;
  Device device = Device::cpu();
  bool any = false;
  for (const auto& [name, p] : module.named_parameters()) {
    if (!any) device = p.device();
    any = true;
    if (!claimed.count(p.impl())) mine.emplace_back(name, p);
  }
  EMBER_CHECK(any, ValueError, kOp, " ", module.type_name(), " has no parameters");
  std::shared_ptr<ProcessGroup> group = options.group ? options.group : default_group(device);

  auto unit = std::make_unique<FsdpUnit>();
  unit->module = &module;
  unit->reshard_after_forward = options.reshard_after_forward;
  std::string describe = module.type_name();
  if (!mine.empty()) unit->orig_dtype = mine[0].second.dtype();
  for (const auto& [name, p] : mine) {
    EMBER_CHECK(p.dtype() == unit->orig_dtype && p.device() == device, DTypeError, kOp, " rank ", group->rank(),
                ": the parameters of one unit must share a dtype and device: '", mine[0].first, "' is ",
                mine[0].second.dtype(), " on ", device, ", '", name, "' is ", p.dtype(), " on ", p.device());
    EMBER_CHECK(p.device().type == group->device().type, DeviceError, kOp, " rank ", group->rank(),
                ": parameter '", name, "' is on ", p.device(), " but the ", group->backend(),
                " group communicates ", group->device(), " tensors");
    unit->offsets.push_back(unit->numel);
    unit->numel += p.numel();
    unit->params.push_back(p);
    unit->trainable.push_back(p.requires_grad());
    unit->n_trainable += p.requires_grad();
    describe += str(" ", name, ":", p.sizes(), ":", p.dtype());
  }
  detail::check_same_on_every_rank(*group, "fully_shard", describe);
  const int W = group->size(), r = group->rank();
  unit->shard_numel = (unit->numel + W - 1) / W;
  unit->compute_dtype = options.mixed_precision.param_dtype.value_or(unit->orig_dtype);
  unit->reduce_dtype = options.mixed_precision.reduce_dtype.value_or(unit->compute_dtype);
  {
    NoGradGuard no_grad;
    const TensorOptions at(device);
    // Rank 0's values everywhere, then this rank keeps its slice.
    Tensor full = zeros({W * unit->shard_numel}, at.dtype(unit->orig_dtype));
    for (size_t i = 0; i < unit->params.size(); ++i)
      full.narrow(0, unit->offsets[i], unit->params[i].numel()).copy_(unit->params[i].reshape({-1}));
    group->broadcast(full, 0);
    unit->shard = full.narrow(0, int64_t(r) * unit->shard_numel, unit->shard_numel).clone();
    // The parameters become views of the unsharded buffer (whose memory goes at once).
    unit->flat = empty({W * unit->shard_numel}, at.dtype(unit->compute_dtype));
    for (size_t i = 0; i < unit->params.size(); ++i) {
      Tensor& p = unit->params[i];
      p.set_grad(Tensor());
      p.set_data(unit->flat.narrow(0, unit->offsets[i], p.numel()).view(p.sizes()));
    }
    unit->flat.storage()->release_memory();
    // The pieces: each parameter's elements within [r S, (r + 1) S).
    const int64_t lo = int64_t(r) * unit->shard_numel, hi = lo + unit->shard_numel;
    for (size_t i = 0; i < unit->params.size(); ++i) {
      const int64_t a = std::max(lo, unit->offsets[i]);
      const int64_t b = std::min(hi, unit->offsets[i] + unit->params[i].numel());
      unit->piece_start.push_back(a - lo);
      if (b > a) {
        Tensor piece = unit->shard.narrow(0, a - lo, b - a).detach();
        piece.requires_grad_(unit->trainable[i] != 0);
        unit->pieces.push_back(piece);
      } else {
        unit->pieces.emplace_back();
      }
    }
  }

  // One state for this unit and every unit below it (their states merge into it).
  auto state = std::make_shared<FsdpState>();
  state->group = group;
  for (const auto& ref : below) {
    std::shared_ptr<FsdpState> old = ref->state;
    if (old == state) continue;
    EMBER_CHECK(old->group == group, ValueError, kOp, " rank ", group->rank(), ": the units below ",
                module.type_name(), " shard over another process group; one group of units shares one group");
    EMBER_CHECK(!old->expecting_backward && old->phase == FsdpState::Phase::idle, ValueError, kOp,
                " a unit below ", module.type_name(), " is in the middle of an iteration");
    for (auto& u : old->units) state->units.push_back(std::move(u));
    for (auto& w : old->refs)
      if (auto rr = w.lock()) {
        rr->state = state;
        state->refs.push_back(rr);
      }
    old->units.clear();
    old->refs.clear();
  }
  FsdpUnit* u = unit.get();
  state->units.push_back(std::move(unit));
  auto ref = std::make_shared<FsdpUnitRef>();
  ref->state = state;
  ref->unit = u;
  state->refs.push_back(ref);
  {
    std::lock_guard lock(detail::g_registry_mu);
    detail::g_registry[&module] = ref;
  }

  // The hooks hold the ref (so the units live as long as the module does); the ref is
  // repointed when a unit above merges this one's state.
  module.register_forward_pre_hook([ref](const nn::Module&, const Tensor&) {
    ref->state->pre_forward(*ref->unit);
    return Tensor();
  });
  module.register_forward_hook([ref](const nn::Module&, const Tensor& out) {
    ref->state->post_forward(ref, out);
    return Tensor();
  });
  std::weak_ptr<FsdpUnitRef> weak = ref;
  for (size_t i = 0; i < u->params.size(); ++i) {
    if (!u->trainable[i]) continue;
    u->params[i].register_post_accumulate_grad_hook([weak, i](const Tensor&) {
      if (auto rr = weak.lock()) rr->state->on_grad(*rr->unit, i);
    });
  }
  return FSDPModule(ref);
}

// ---- FSDPModule ----

FsdpState& FSDPModule::state() const { return *ref_->state; }
nn::Module& FSDPModule::module() const { return *ref_->unit->module; }
ProcessGroup& FSDPModule::process_group() const { return *state().group; }

Tensor FSDPModule::forward(const std::function<Tensor()>& fn) const { return state().forward(ref_, fn); }

std::vector<std::pair<std::string, Tensor>> FSDPModule::named_parameters() const {
  std::unordered_map<const TensorImpl*, std::pair<FsdpUnit*, size_t>> where;
  for (const auto& u : state().units)
    for (size_t i = 0; i < u->params.size(); ++i) where[u->params[i].impl()] = {u.get(), i};
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& u : state().units)
    for (const auto& [name, p] : module().named_parameters()) {
      auto it = where.find(p.impl());
      if (it == where.end() || it->second.first != u.get()) continue;
      const Tensor& piece = u->pieces[it->second.second];
      if (piece.defined()) out.emplace_back(name, piece);
    }
  return out;
}

std::vector<Tensor> FSDPModule::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, p] : named_parameters()) out.push_back(p);
  return out;
}

Tensor FSDPModule::shard_of(const Tensor& param) const {
  EMBER_CHECK(param.defined(), ValueError, "[FSDPModule::shard_of] undefined parameter");
  for (const auto& u : state().units)
    for (size_t i = 0; i < u->params.size(); ++i)
      if (u->params[i].is_same(param)) return u->pieces[i];
  throw ValueError(str("[FSDPModule::shard_of] ", param, " is not a parameter of a unit of this FSDPModule"));
}

std::vector<Tensor> FSDPModule::shards_of(const std::vector<Tensor>& params) const {
  std::vector<Tensor> out;
  for (const Tensor& p : params)
    if (Tensor s = shard_of(p); s.defined()) out.push_back(s);
  return out;
}

Tensor FSDPModule::clip_grad_norm_(double max_norm, double norm_type) const {
  EMBER_CHECK(norm_type > 0, ValueError, "[FSDPModule::clip_grad_norm_] norm_type must be positive or inf, got ",
              norm_type);
  NoGradGuard no_grad;
  const Device dev = process_group().device().is_cpu() ? Device::cpu() : process_group().device();
  const bool inf = std::isinf(norm_type);
  Tensor total = zeros({1}, TensorOptions(dev).dtype(DType::f64));
  std::vector<Tensor> grads;
  for (const Tensor& p : parameters())
    if (p.grad().defined()) grads.push_back(p.grad());
  for (const Tensor& g : grads) {
    const Tensor a = g.to(DType::f64).abs();
    if (inf) total = total.maximum(a.max().reshape({1}));
    else total = total + a.pow(norm_type).sum().reshape({1});
  }
  process_group().all_reduce(total, inf ? ReduceOp::max : ReduceOp::sum);
  if (!inf) total = total.pow(1.0 / norm_type);
  const Tensor coef = (max_norm / (total + 1e-6)).clamp_max(1.0);
  for (const Tensor& g : grads) Tensor(g).mul_(coef.to(g.dtype()));
  return total.reshape({}).to(DType::f32);
}

void FSDPModule::finish_gradient_synchronization() const {
  FsdpState& s = state();
  if (s.expecting_backward && s.pending > 0)
    throw DistributedError(str(s.where("FSDPModule::finish_gradient_synchronization"),
                               ": the backward has not completed its gradient reduction: parameters without a "
                               "gradient: ",
                               s.missing_gradients()));
}

FSDPModule::NoSyncGuard::NoSyncGuard(const FSDPModule& fsdp) : state_(fsdp.ref_->state), prev_(state_->require_sync) {
  state_->require_sync = false;
}
FSDPModule::NoSyncGuard::~NoSyncGuard() { state_->require_sync = prev_; }

FSDPModule::FullParams::FullParams(const FSDPModule& fsdp, bool writeback)
    : state_(fsdp.ref_->state), writeback_(writeback) {
  for (const auto& u : state_->units)
    EMBER_CHECK(!writeback || u->compute_dtype == u->orig_dtype, ValueError, state_->where("summon_full_params"),
                ": writeback with mixed precision would round the ", u->orig_dtype, " shards to ", u->compute_dtype,
                "; use load_full_state_dict");
  EMBER_CHECK(!state_->expecting_backward && state_->phase == FsdpState::Phase::idle, ValueError,
              state_->where("summon_full_params"), ": not inside an iteration (between forward and the end of its backward)");
  for (auto& u : state_->units) state_->unshard_async(*u);
  for (auto& u : state_->units) state_->unshard(*u);
  ++state_->summoned;
}

FSDPModule::FullParams::~FullParams() noexcept(false) {
  FsdpState& s = *state_;
  if (--s.summoned > 0) return;
  const bool unwinding = std::uncaught_exceptions() > 0;
  if (writeback_ && !unwinding) {
    NoGradGuard no_grad;
    const int64_t lo = int64_t(s.group->rank());
    for (auto& u : s.units)
      u->shard.copy_(u->flat.narrow(0, lo * u->shard_numel, u->shard_numel));
  }
  s.reshard_all();
}

// The parameters come from the shards in their original dtype (the f32 masters under mixed
// precision, not the compute copies): one all_gather per unit into a temporary full vector.
StateDict FSDPModule::full_state_dict() const {
  FsdpState& s = state();
  EMBER_CHECK(!s.expecting_backward && s.phase == FsdpState::Phase::idle, ValueError, s.where("full_state_dict"),
              ": not inside an iteration (between forward and the end of its backward)");
  NoGradGuard no_grad;
  // Each parameter's storage and offset -> its gathered value.
  struct Full {
    const Storage* storage;
    int64_t offset;
    Tensor value;
  };
  std::vector<Full> full;
  for (const auto& u : s.units) {
    Tensor all = empty({u->flat.numel()}, TensorOptions(u->shard.device()).dtype(u->orig_dtype));
    s.group->all_gather(all, u->shard);
    for (size_t i = 0; i < u->params.size(); ++i) {
      const Tensor& p = u->params[i];
      full.push_back({p.storage().get(), p.storage_offset(),
                      all.narrow(0, u->offsets[i], p.numel()).view(p.sizes()).clone()});
    }
  }
  StateDict out;
  for (const auto& [name, t] : module().state_dict()) {
    Tensor value;
    for (const Full& f : full)
      if (f.storage == t.storage().get() && f.offset == t.storage_offset()) value = f.value;
    out.insert(name, value.defined() ? value : t.clone());  // a buffer: never sharded
  }
  return out;
}

// Every rank holds the whole state: each writes the elements of its own range straight into
// its shard (no communication), in the shards' dtype.
void FSDPModule::load_full_state_dict(const StateDict& state_dict, bool strict) const {
  FsdpState& s = state();
  const char* op = "[FSDPModule::load_full_state_dict]";
  EMBER_CHECK(!s.expecting_backward && s.phase == FsdpState::Phase::idle, ValueError, op,
              " not inside an iteration (between forward and the end of its backward)");
  const StateDict mine = module().state_dict();
  std::string missing, unexpected;
  for (const auto& [name, t] : mine)
    if (!state_dict.contains(name)) missing += (missing.empty() ? "" : ", ") + name;
  for (const auto& [name, t] : state_dict)
    if (!mine.contains(name)) unexpected += (unexpected.empty() ? "" : ", ") + name;
  EMBER_CHECK(!strict || (missing.empty() && unexpected.empty()), ValueError, op, " keys do not match: missing [",
              missing, "], unexpected [", unexpected, "]");
  for (const auto& [name, t] : mine)
    if (const Tensor* src = state_dict.find(name))
      EMBER_CHECK(src->sizes() == t.sizes(), ShapeError, op, " '", name, "' has shape ", src->sizes(),
                  " in the state dict, ", t.sizes(), " in the module");
  NoGradGuard no_grad;
  const int64_t r = s.group->rank();
  for (const auto& [name, t] : mine) {
    const Tensor* src = state_dict.find(name);
    if (src == nullptr) continue;
    bool is_param = false;
    for (const auto& u : s.units)
      for (size_t i = 0; i < u->params.size(); ++i) {
        const Tensor& p = u->params[i];
        if (p.storage().get() != t.storage().get() || p.storage_offset() != t.storage_offset()) continue;
        is_param = true;
        const Tensor& piece = u->pieces[i];
        if (!piece.defined()) continue;
        const int64_t start = r * u->shard_numel + u->piece_start[i] - u->offsets[i];  // in the parameter
        Tensor(piece).copy_(src->to(piece.device(), u->orig_dtype).reshape({-1}).narrow(0, start, piece.numel()));
      }
    if (!is_param) Tensor(t).copy_(*src);  // a buffer
  }
}

namespace {
// "state.<k>.<rest>" -> k and rest; nullopt for other keys.
std::optional<std::pair<size_t, std::string>> optimizer_state_key(const std::string& key) {
  if (key.rfind("state.", 0) != 0) return std::nullopt;
  const size_t dot = key.find('.', 6);
  if (dot == std::string::npos || dot == 6) return std::nullopt;
  size_t k = 0;
  for (size_t i = 6; i < dot; ++i) {
    if (key[i] < '0' || key[i] > '9') return std::nullopt;
    k = k * 10 + size_t(key[i] - '0');
  }
  return std::make_pair(k, key.substr(dot + 1));
}
}  // namespace

// Where each piece lies: its parameter's name, shape, and its first element in it.
struct PieceInfo {
  std::string name;
  Shape shape;
  int64_t begin = 0;
};

static std::vector<std::pair<Tensor, PieceInfo>> piece_infos(const FsdpState& s, const nn::Module& root) {
  std::unordered_map<const TensorImpl*, std::string> names;
  for (const auto& [name, t] : root.named_parameters()) names.emplace(t.impl(), name);
  std::vector<std::pair<Tensor, PieceInfo>> out;
  const int64_t r = s.group->rank();
  for (const auto& u : s.units)
    for (size_t i = 0; i < u->params.size(); ++i)
      if (u->pieces[i].defined())
        out.push_back({u->pieces[i], {names.at(u->params[i].impl()), u->params[i].sizes(),
                                      r * u->shard_numel + u->piece_start[i] - u->offsets[i]}});
  return out;
}

ShardedStateDict FSDPModule::sharded_state_dict(const optim::Optimizer* optimizer) const {
  const FsdpState& s = state();
  const char* op = "[FSDPModule::sharded_state_dict]";
  EMBER_CHECK(!s.expecting_backward && s.phase == FsdpState::Phase::idle, ValueError, op,
              " not inside an iteration (between forward and the end of its backward)");
  const bool rank0 = s.group->rank() == 0;
  const auto pieces = piece_infos(s, module());
  ShardedStateDict out;
  for (const auto& [piece, info] : pieces) out.insert("model." + info.name, piece.detach(), info.shape, info.begin);
  if (rank0)
    for (const auto& [name, b] : module().named_buffers()) out.insert_whole("model." + name, b.detach());
  if (!optimizer) return out;
  const std::vector<Tensor> params = optimizer->parameters();
  std::vector<const std::pair<Tensor, PieceInfo>*> of(params.size(), nullptr);
  for (size_t k = 0; k < params.size(); ++k) {
    for (const auto& pi : pieces)
      if (pi.first.is_same(params[k])) of[k] = &pi;
    EMBER_CHECK(of[k] != nullptr, ValueError, op, " rank ", s.group->rank(), ": the optimizer's parameter ", k,
                " is not a piece of this FSDPModule; build the optimizer over fsdp.parameters() or fsdp.shards_of(...)");
  }
  for (const auto& [key, t] : optimizer->state_dict()) {
    if (auto sk = optimizer_state_key(key)) {
      const PieceInfo& info = of[sk->first]->second;
      const std::string name = str("optim.", info.name, ".", sk->second);
      if (t.dim() == 0) out.insert_whole(name, t);  // the step count
      else out.insert(name, t, info.shape, info.begin);
    } else if (rank0 && key.rfind("param_groups.", 0) == 0 && !key.ends_with(".params")) {
      out.insert_whole("optim." + key, t);
    }
  }
  return out;
}

void FSDPModule::load_sharded_state_dict(const ShardedSource& source, optim::Optimizer* optimizer) const {
  FsdpState& s = state();
  const char* op = "[FSDPModule::load_sharded_state_dict]";
  EMBER_CHECK(!s.expecting_backward && s.phase == FsdpState::Phase::idle, ValueError, op,
              " not inside an iteration (between forward and the end of its backward)");
  auto need = [&](const std::string& key, const Shape& shape) {
    EMBER_CHECK(source.contains(key), ValueError, op, " rank ", s.group->rank(), ": the checkpoint has no '", key, "'");
    EMBER_CHECK(source.shape(key) == shape, ShapeError, op, " '", key, "' has shape ", source.shape(key),
                " in the checkpoint, ", shape, " here");
  };
  // 1. Read everything this rank needs (nothing changes if anything is missing or misshapen).
  NoGradGuard no_grad;
  const auto pieces = piece_infos(s, module());
  std::vector<std::pair<Tensor, Tensor>> copies;  // (destination, value)
  for (const auto& [piece, info] : pieces) {
    need("model." + info.name, info.shape);
    copies.emplace_back(piece, source.read("model." + info.name, info.begin, piece.numel()));
  }
  for (const auto& [name, b] : module().named_buffers()) {
    need("model." + name, b.sizes());
    copies.emplace_back(b.detach(), source.read("model." + name, 0, b.numel()).view(b.sizes()));
  }
  StateDict opt_state;
  if (optimizer) {
    const std::vector<Tensor> params = optimizer->parameters();
    const std::vector<std::string> keys = source.keys();
    for (size_t k = 0; k < params.size(); ++k) {
      const std::pair<Tensor, PieceInfo>* pi = nullptr;
      for (const auto& p : pieces)
        if (p.first.is_same(params[k])) pi = &p;
      EMBER_CHECK(pi != nullptr, ValueError, op, " rank ", s.group->rank(), ": the optimizer's parameter ", k,
                  " is not a piece of this FSDPModule; build the optimizer over fsdp.parameters() or fsdp.shards_of(...)");
      const std::string prefix = "optim." + pi->second.name + ".";
      for (auto it = std::lower_bound(keys.begin(), keys.end(), prefix); it != keys.end() && it->rfind(prefix, 0) == 0; ++it) {
        const std::string buffer = it->substr(prefix.size());
        if (buffer.find('.') != std::string::npos) continue;
        const Shape shape = source.shape(*it);
        Tensor value = shape.size() == 0 ? source.read(*it, 0, 1).view({})
                                         : (need(*it, pi->second.shape),
                                            source.read(*it, pi->second.begin, pi->first.numel()));
        opt_state.insert(str("state.", k, ".", buffer), value);
      }
    }
    for (const auto& [key, t] : optimizer->state_dict()) {
      if (key.rfind("param_groups.", 0) != 0) continue;
      if (key.ends_with(".params")) {
        opt_state.insert(key, t);
        continue;
      }
      need("optim." + key, t.sizes());
      opt_state.insert(key, source.read("optim." + key, 0, t.numel()).view(t.sizes()));
    }
  }
  // 2. Apply (the optimizer validates everything before it changes anything: first).
  if (optimizer) optimizer->load_state_dict(opt_state);
  for (auto& [dst, value] : copies) Tensor(dst).copy_(value.to(dst.device(), dst.dtype()));
}

FSDPMemory FSDPModule::memory() const {
  FSDPMemory m;
  const FsdpState& s = state();
  for (const auto& u : s.units) {
    m.sharded_parameters += u->shard.numel() * int64_t(u->shard.element_size());
    for (const Tensor& piece : u->pieces)
      if (piece.defined() && piece.grad().defined()) m.sharded_gradients += piece.grad().numel() * int64_t(piece.grad().element_size());
    m.largest_unit = std::max(m.largest_unit, u->flat_bytes());
  }
  m.gathered_now = s.gathered_now;
  m.gathered_peak = s.gathered_peak;
  return m;
}

std::vector<FSDPModule::UnitInfo> FSDPModule::units() const {
  std::vector<UnitInfo> out;
  const auto modules = module().named_modules();
  for (const auto& u : state().units) {
    std::string name = "?";
    for (const auto& [n, m] : modules)
      if (m == u->module) name = n;
    out.push_back({name, u->numel, u->shard_numel});
  }
  return out;
}

}  // namespace ember::distributed
