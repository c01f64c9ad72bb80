// oneDNN convolutions for ops/cpu/conv.cpp (interface and layout in ops/cpu/onednn.h).
//
// One Plan per (pass, shape, parameters, bias, layout, thread count): the primitive, and for
// each operand the reorder between ember's buffer and the primitive's layout (none where they
// are the same). On NCHW activations the primitive is created with format_tag::any, so oneDNN
// picks its fastest (blocked) layout and every call reorders; on NHWC (channels_last) it is
// created on NHWC itself, which its JIT kernels read directly (measured on the resnet example's
// shapes: as fast or faster than blocked, before counting the reorders saved). Weights are
// always format_tag::any: they are small, and their reorder is cheap. oneDNN sizes
// a primitive's work split for the thread count at its creation, hence the count in the key
// (ops/cpu/conv.cpp never calls from inside a caller's OpenMP team: see allowed_algorithms).
// Primitives are created outside the lock and the first insert wins, so two threads meeting a
// new shape at once both compute correctly. A shape oneDNN refuses, or fails to make a
// primitive for, gets an empty plan: supports() is false and ember's own kernels run. Plans
// live as long as the process (a model has a few dozen shapes; each plan is tens of KiB of JIT
// code and descriptors), as do the engine and the lock (calls may come after main returns).
//
// Workspace (the blocked copies and oneDNN's scratchpad, "user" mode so it is not kept by
// oneDNN between calls) is one buffer from ember's CPU allocator per call: the allocator's
// cache hands the same block back next step, and its bytes count in ember's memory figures.
#include <bit>
#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <unordered_map>
#include <vector>

#include "ember/error.h"
#include "ember/tensor.h"
#include "conv_key.h"
#include "onednn.h"

namespace ember::ops::cpu::onednn {

namespace {

using dnnl::memory;
using Tag = memory::format_tag;
using DataType = memory::data_type;

dnnl::engine& cpu_engine() {
  static auto* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);  // never destroyed
  return *engine;
}

using Key = ConvKey;

// One operand of a primitive: its argument id, ember's layout and the primitive's, and the
// reorder between them (into the primitive's for inputs, out of it for the output).
struct Operand {
  int arg;
  memory::desc user, mine;
  bool output;
  std::optional<dnnl::reorder> convert;
};

struct Plan {
  std::optional<dnnl::primitive> primitive;  // empty: oneDNN offers only its reference loops
  std::string kernel;
  std::vector<Operand> operands;
  memory::desc scratchpad;
};

memory::dims dims_of(const std::array<int64_t, 4>& s) { return {s[0], s[1], s[2], s[3]}; }

// The weight as oneDNN describes a grouped convolution's: [groups, O / groups, C / groups, kH,
// kW], the same bytes as ember's [O, C / groups, kH, kW].
memory::desc user_weight_desc(const Key& k) {
  if (k.groups == 1) return memory::desc(dims_of(k.w), DataType::f32, Tag::oihw);
  return memory::desc({k.groups, k.w[0] / k.groups, k.w[1], k.w[2], k.w[3]}, DataType::f32, Tag::goihw);
}

// oneDNN names its reference implementations "ref:..." (and its GEMM-based ones, which are
// ember's own im2col + GEMM in another library, "gemm:..."): neither is worth choosing.
bool optimized(const std::string& kernel) { return kernel.rfind("jit", 0) == 0 || kernel.rfind("brg", 0) == 0; }

Plan make_plan(const Key& k) {
  auto& engine = cpu_engine();
  const int64_t Ho = conv_output_size(k.x[2], k.w[2], k.stride[0], k.padding[0], k.dilation[0]);
  const int64_t Wo = conv_output_size(k.x[3], k.w[3], k.stride[1], k.padding[1], k.dilation[1]);
  const memory::dims xd = dims_of(k.x), yd{k.x[0], k.w[0], Ho, Wo};
  const Tag user_tag = k.format == MemoryFormat::channels_last ? Tag::nhwc : Tag::nchw;
  const Tag act_tag = k.format == MemoryFormat::channels_last ? Tag::nhwc : Tag::any;
  const memory::desc x_user(xd, DataType::f32, user_tag), y_user(yd, DataType::f32, user_tag);
  const memory::desc x_any(xd, DataType::f32, act_tag), y_any(yd, DataType::f32, act_tag);
  const memory::desc w_user = user_weight_desc(k);
  const memory::desc w_any(w_user.dims(), DataType::f32, Tag::any), b_desc({k.w[0]}, DataType::f32, Tag::x);
  // oneDNN's dilation counts the gaps: 0 is a dense kernel.
  const memory::dims strides{k.stride[0], k.stride[1]}, pads{k.padding[0], k.padding[1]};
  const memory::dims dilation{k.dilation[0] - 1, k.dilation[1] - 1};
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);

  using Fwd = dnnl::convolution_forward;
  const auto fwd_desc =
      k.bias ? Fwd::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, x_any, w_any, b_desc,
                         y_any, strides, dilation, pads, pads)
             : Fwd::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, x_any, w_any, y_any,
                         strides, dilation, pads, pads);
  const Fwd::primitive_desc fwd(fwd_desc, attr, engine);

  Plan plan;
  auto operand = [&](int arg, const memory::desc& user, const memory::desc& mine, bool output) {
    Operand o{arg, user, mine, output, std::nullopt};
    if (user != mine) {
      o.convert = output ? dnnl::reorder(dnnl::reorder::primitive_desc(engine, mine, engine, user))
                         : dnnl::reorder(dnnl::reorder::primitive_desc(engine, user, engine, mine));
    }
    plan.operands.push_back(std::move(o));
  };
  auto finish = [&](const auto& pd, auto make) {
    plan.kernel = pd.impl_info_str();
    plan.scratchpad = pd.scratchpad_desc();
    if (optimized(plan.kernel)) plan.primitive = make(pd);
  };
  switch (k.pass) {
    case Pass::forward:
      operand(DNNL_ARG_SRC, x_user, fwd.src_desc(), false);
      operand(DNNL_ARG_WEIGHTS, w_user, fwd.weights_desc(), false);
      if (k.bias) operand(DNNL_ARG_BIAS, b_desc, fwd.bias_desc(), false);
      operand(DNNL_ARG_DST, y_user, fwd.dst_desc(), true);
      finish(fwd, [](const auto& pd) { return dnnl::primitive(Fwd(pd)); });
      break;
    case Pass::backward_input: {
      using Bwd = dnnl::convolution_backward_data;
      const Bwd::primitive_desc pd(
          Bwd::desc(dnnl::algorithm::convolution_direct, x_any, w_any, y_any, strides, dilation, pads, pads), attr,
          engine, fwd);
      operand(DNNL_ARG_DIFF_DST, y_user, pd.diff_dst_desc(), false);
      operand(DNNL_ARG_WEIGHTS, w_user, pd.weights_desc(), false);
      operand(DNNL_ARG_DIFF_SRC, x_user, pd.diff_src_desc(), true);
      finish(pd, [](const auto& p) { return dnnl::primitive(Bwd(p)); });
      break;
    }
    case Pass::backward_weight: {
      using Bwd = dnnl::convolution_backward_weights;
      const Bwd::primitive_desc pd(
          Bwd::desc(dnnl::algorithm::convolution_direct, x_any, w_any, y_any, strides, dilation, pads, pads), attr,
          engine, fwd);
      operand(DNNL_ARG_DIFF_DST, y_user, pd.diff_dst_desc(), false);
      operand(DNNL_ARG_SRC, x_user, pd.src_desc(), false);
      operand(DNNL_ARG_DIFF_WEIGHTS, w_user, pd.diff_weights_desc(), true);
      finish(pd, [](const auto& p) { return dnnl::primitive(Bwd(p)); });
      break;
    }
  }
  if (!plan.primitive) plan.operands.clear();  // nothing will run: no reorders to keep
  return plan;
}

// oneDNN reports failures as dnnl::error (a bad argument here would be ember's bug; out of
// memory is the user's): ember's Error with oneDNN's words and the shape.
[[noreturn]] void rethrow(const dnnl::error& e, const Key& k) {
  throw Error(str("[conv2d] oneDNN failed (", e.what(), ", status ", int(e.status), ") on input [", k.x[0], ", ",
                  k.x[1], ", ", k.x[2], ", ", k.x[3], "], weight [", k.w[0], ", ", k.w[1], ", ", k.w[2], ", ",
                  k.w[3], "]; ops::set_conv_onednn(false) avoids it"));
}

const Plan& plan_for(const Key& k) {
  static auto* mutex = new std::mutex;                 // never destroyed, as the plans
  static auto* plans = new std::map<Key, Plan>;
  {
    std::lock_guard<std::mutex> lock(*mutex);
    auto it = plans->find(k);
    if (it != plans->end()) return it->second;
  }
  Plan plan;
  try {
    plan = make_plan(k);
  } catch (const dnnl::error&) {
    // Unimplemented for this shape, or no memory for the JIT: not an error for ember, whose
    // own kernels then compute it.
    plan = Plan{};
  }
  std::lock_guard<std::mutex> lock(*mutex);
  return plans->emplace(k, std::move(plan)).first->second;  // the first insert wins
}

size_t round_up(size_t n) { return (n + 63) & ~size_t(63); }

// The workspace's size class: the next of four steps per power of two (at most 25% over).
// The CPU allocator caches freed blocks by exact size, and every shape and pass needs its own
// workspace size: exact requests left a model's few dozen sizes cached side by side (+121 MB
// resident for the resnet example), classes let them share a few blocks.
size_t size_class(size_t n) {
  if (n <= 4096) return n;
  const size_t quarter = std::bit_floor(n) / 4;
  return (n + quarter - 1) / quarter * quarter;
}

// Runs the plan on ember's buffers (ptrs in the order of plan.operands).
void run(const Plan& plan, const Key& key, const std::vector<void*>& ptrs) {
  EMBER_CHECK(plan.primitive.has_value(), Error, "[conv2d] internal: oneDNN has no optimized kernel for this shape");
  auto& engine = cpu_engine();
  size_t bytes = round_up(plan.scratchpad.get_size());
  for (const Operand& o : plan.operands)
    if (o.convert) bytes += round_up(o.mine.get_size());
  const Tensor workspace = detail::make_tensor({int64_t(size_class(bytes))}, DType::u8, Device::cpu());
  char* free_space = static_cast<char*>(workspace.data_ptr());
  auto take = [&](size_t n) {
    char* p = free_space;
    free_space += round_up(n);
    return p;
  };
  try {
    dnnl::stream stream(engine);
    std::unordered_map<int, memory> args;
    std::vector<std::pair<const Operand*, memory>> outputs;  // (operand, ember's buffer)
    for (size_t i = 0; i < plan.operands.size(); ++i) {
      const Operand& o = plan.operands[i];
      memory user(o.user, engine, ptrs[i]);
      if (!o.convert) {
        args.emplace(o.arg, user);
        continue;
      }
      memory mine(o.mine, engine, take(o.mine.get_size()));
      if (o.output) outputs.emplace_back(&o, user);
      else o.convert->execute(stream, user, mine);
      args.emplace(o.arg, mine);
    }
    if (plan.scratchpad.get_size() > 0)
      args.emplace(DNNL_ARG_SCRATCHPAD, memory(plan.scratchpad, engine, take(plan.scratchpad.get_size())));
    plan.primitive->execute(stream, args);
    for (auto& [o, user] : outputs) o->convert->execute(stream, args.at(o->arg), user);
    stream.wait();
  } catch (const dnnl::error& e) {
    rethrow(e, key);
  }
}

}  // namespace

std::string version() {
  const dnnl_version_t* v = dnnl_version();
  return str("oneDNN ", v->major, ".", v->minor, ".", v->patch);
}

std::string kernel_name(Pass pass, const Shape& x, const Shape& w, const Conv2dParams& p, bool bias,
                        MemoryFormat format) {
  const Plan& plan = plan_for(Key::of(pass, x, w, p, bias && pass == Pass::forward, format));
  return plan.primitive ? plan.kernel : "";
}

bool supports(Pass pass, const Shape& x, const Shape& w, const Conv2dParams& p, bool bias, MemoryFormat format) {
  return !kernel_name(pass, x, w, p, bias, format).empty();
}

void forward(const float* x, const float* w, const float* bias, float* y, const Shape& xs, const Shape& ws,
             const Conv2dParams& p, MemoryFormat format) {
  const Key k = Key::of(Pass::forward, xs, ws, p, bias != nullptr, format);
  std::vector<void*> ptrs{const_cast<float*>(x), const_cast<float*>(w)};
  if (bias) ptrs.push_back(const_cast<float*>(bias));
  ptrs.push_back(y);
  run(plan_for(k), k, ptrs);
}

void backward_input(const float* gy, const float* w, float* gx, const Shape& xs, const Shape& ws,
                    const Conv2dParams& p, MemoryFormat format) {
  const Key k = Key::of(Pass::backward_input, xs, ws, p, false, format);
  run(plan_for(k), k, {const_cast<float*>(gy), const_cast<float*>(w), gx});
}

void backward_weight(const float* gy, const float* x, float* gw, const Shape& xs, const Shape& ws,
                     const Conv2dParams& p, MemoryFormat format) {
  const Key k = Key::of(Pass::backward_weight, xs, ws, p, false, format);
  run(plan_for(k), k, {const_cast<float*>(gy), const_cast<float*>(x), gw});
}

}  // namespace ember::ops::cpu::onednn
