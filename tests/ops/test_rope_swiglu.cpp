// The Llama ops' kernels (ops/cpu/rope.cpp, swiglu.cpp; ops/cuda/rope.cu, swiglu.cu): f64
// against PyTorch (tests/fixtures/rope_swiglu_reference.txt from make_rope_swiglu_fixtures.py:
// Hugging Face's rotate_half RoPE and F.silu(gate) * up, outputs and gradients), every dtype
// against f64 host loops on the same rounded inputs (so 16-bit results must be the f32 math
// rounded once), on the layouts each driver path takes (unit stride or strided along D, views
// of fused projections, one thread or many), and the error messages. The CUDA bodies compare
// with the CPU and skip without a GPU.
#include <array>
#include <cmath>
#include <functional>
#include <tuple>
#include <vector>

#include "ember/ops/rope.h"
#include "ember/ops/swiglu.h"
#include "support/test_support.h"

using namespace ember;
using test::all_close;

namespace {

const char* kRef = "rope_swiglu_reference.txt";
Tensor ref(const std::string& name) { return test::load_fixture(kRef, name).tensor(); }

std::vector<double> vals(const Tensor& t) {
  Tensor c = t.to(Device::cpu(), DType::f64).contiguous();
  const double* p = c.data_ptr<double>();
  return std::vector<double>(p, p + c.numel());
}

// About one unit in the last place of a result stored in dt (the kernels round once).
double ulp_tol(DType dt) {
  switch (dt) {
    case DType::f64: return 1e-13;
    case DType::f32: return 2e-6;
    case DType::f16: return 1.5e-3;
    default: return 1e-2;  // bf16
  }
}

// f64 host loops of the definitions, on the values of x (any layout) and [T, D/2] tables.
Tensor rope_ref(const Tensor& x, const Tensor& cos, const Tensor& sin, double sign = 1.0) {
  const std::vector<double> xv = vals(x), c = vals(cos), s = vals(sin);
  const int64_t B = x.size(0), T = x.size(1), H = x.size(2), D = x.size(3), half = D / 2;
  std::vector<double> out(xv.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h) {
        const size_t row = size_t(((b * T + t) * H + h) * D);
        for (int64_t i = 0; i < half; ++i) {
          const double x0 = xv[row + size_t(i)], x1 = xv[row + size_t(i + half)];
          const double cc = c[size_t(t * half + i)], ss = sign * s[size_t(t * half + i)];
          out[row + size_t(i)] = x0 * cc - x1 * ss;
          out[row + size_t(i + half)] = x1 * cc + x0 * ss;
        }
      }
  return tensor<double>(out, x.sizes());
}

struct SwigluRef {
  Tensor y, dgate, dup;
};
SwigluRef swiglu_ref(const Tensor& gate, const Tensor& up, const Tensor& grad) {
  const std::vector<double> g = vals(gate), u = vals(up), go = vals(grad);
  std::vector<double> y(g.size()), dg(g.size()), du(g.size());
  for (size_t i = 0; i < g.size(); ++i) {
    const double sig = 1.0 / (1.0 + std::exp(-g[i]));
    y[i] = g[i] * sig * u[i];
    dg[i] = go[i] * u[i] * sig * (1.0 + g[i] * (1.0 - sig));
    du[i] = go[i] * g[i] * sig;
  }
  return {tensor<double>(y, gate.sizes()), tensor<double>(dg, gate.sizes()),
          tensor<double>(du, gate.sizes())};
}

// The fixture's rope case: q [B, H, T, D] in HF's layout, tables narrowed to past .. past + T.
constexpr int64_t kPast = 3;
struct RopeCase {
  Tensor q, x, cos, sin;
};
RopeCase rope_case() {
  RopeCase c;
  c.q = ref("rope.q");
  c.x = c.q.transpose(1, 2);  // [B, T, H, D], strided
  const int64_t T = c.x.size(1);
  c.cos = ref("rope.cos").narrow(0, kPast, T);
  c.sin = ref("rope.sin").narrow(0, kPast, T);
  return c;
}

}  // namespace

// ---- rotary_embedding ----

TEST(RopeOps, MatchesTorchF64) {
  const RopeCase c = rope_case();
  ASSERT_FALSE(c.x.is_contiguous());
  Tensor y = ops::rotary_embedding(c.x, c.cos, c.sin);
  EXPECT_TRUE(y.is_contiguous());
  EXPECT_TRUE(all_close(y, ref("rope.y"), 1e-13, 1e-14));
  // The VJP (the inverse rotation of gy) is PyTorch's dq, in [B, T, H, D].
  Tensor dx = ops::rotary_embedding(ref("rope.gy"), c.cos, c.sin, true);
  EXPECT_TRUE(all_close(dx, ref("rope.dq").transpose(1, 2).contiguous(), 1e-13, 1e-14));
  // f32 tables serve an f64 x too.
  Tensor y32 = ops::rotary_embedding(c.x, c.cos.to(DType::f32), c.sin.to(DType::f32));
  EXPECT_TRUE(all_close(y32, ref("rope.y"), 1e-6, 1e-6));
}

TEST(RopeOps, EveryDtypeAndLayout) {
  manual_seed(41);
  const auto [cos, sin] = rope_cos_sin(40, 16, 10000.0);  // narrowed to the last T rows
  for (DType dt : {DType::f64, DType::f32, DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor tc = dt == DType::f64 ? cos.to(DType::f64) : cos;
    const Tensor ts = dt == DType::f64 ? sin.to(DType::f64) : sin;
    Tensor base = randn({2, 4, 7, 32}).to(dt);
    const std::vector<std::pair<const char*, Tensor>> layouts = {
        {"contiguous", randn({2, 7, 4, 16}).to(dt)},
        {"transposed [B, H, T, D]", base.slice(3, 0, 16).transpose(1, 2)},
        {"strided along D", base.slice(3, 0, 32, 2).transpose(1, 2)},
        {"one head of a fused qkv", randn({2, 7, 3 * 4 * 16}).to(dt).view({2, 7, 12, 16}).slice(2, 4, 8)},
        // rows * D >= the CPU's parallel grain: OpenMP rows.
        {"large", randn({2, 33, 32, 16}).to(dt)},
    };
    for (const auto& [name, x] : layouts) {
      SCOPED_TRACE(name);
      const int64_t T = x.size(1);
      Tensor c = tc.narrow(0, 40 - T, T), s = ts.narrow(0, 40 - T, T);
      Tensor y = ops::rotary_embedding(x, c, s);
      EXPECT_EQ(y.dtype(), dt);
      EXPECT_TRUE(y.is_contiguous());
      const double tol = ulp_tol(dt);
      EXPECT_TRUE(all_close(y, rope_ref(x, c, s), tol, tol));
      EXPECT_TRUE(all_close(ops::rotary_embedding(x, c, s, true), rope_ref(x, c, s, -1.0), tol, tol));
    }
  }
}

TEST(RopeOps, InverseUndoesTheRotation) {
  manual_seed(42);
  const auto [cos, sin] = rope_cos_sin(9, 64, 10000.0, DType::f64);
  Tensor x = randn({2, 9, 3, 64}, DType::f64);
  Tensor back = ops::rotary_embedding(ops::rotary_embedding(x, cos, sin), cos, sin, true);
  EXPECT_TRUE(all_close(back, x, 1e-13, 1e-13));
  // Position 0 is the identity (angle 0).
  Tensor x0 = x.narrow(1, 0, 1);
  EXPECT_TRUE(all_close(ops::rotary_embedding(x0, cos.narrow(0, 0, 1), sin.narrow(0, 0, 1)),
                        x0.contiguous(), 0, 0));
}

TEST(RopeOps, CosSinTablesMatchTorch) {
  auto [c, s] = rope_cos_sin(9, 8, 10000.0, DType::f64);
  EXPECT_TRUE(all_close(c, ref("rope.cos"), 1e-15, 1e-15));
  EXPECT_TRUE(all_close(s, ref("rope.sin"), 1e-15, 1e-15));
  auto [cb, sb] = rope_cos_sin(16, 128, 500000.0, DType::f64);
  EXPECT_TRUE(all_close(cb, ref("rope.table_big.cos"), 1e-15, 1e-15));
  EXPECT_TRUE(all_close(sb, ref("rope.table_big.sin"), 1e-15, 1e-15));
  auto [c32, s32] = rope_cos_sin(16, 128, 500000.0);  // default: f32 on the CPU
  EXPECT_EQ(c32.dtype(), DType::f32);
  EXPECT_TRUE(c32.device().is_cpu());
  EXPECT_EQ(c32.sizes(), (Shape{16, 64}));
  EXPECT_TRUE(all_close(s32, ref("rope.table_big.sin"), 1e-7, 1e-7));
  EXPECT_NE(test::message_of<ValueError>([] { rope_cos_sin(4, 7); }).find("[rope_cos_sin]"),
            std::string::npos);
}

TEST(RopeOps, Errors) {
  const auto tables = rope_cos_sin(5, 8);
  const Tensor c = tables.first, s = tables.second;
  Tensor x = randn({2, 5, 3, 8});
  auto msg = [](auto f) { return test::message_of<ShapeError>(f); };
  EXPECT_EQ(msg([&] { ops::rotary_embedding(randn({5, 3, 8}), c, s); }).rfind("[rotary_embedding] expects x of shape [B, T, H, D]", 0), 0u);
  EXPECT_EQ(msg([&] { ops::rotary_embedding(randn({2, 5, 3, 7}), c.narrow(1, 0, 3), s.narrow(1, 0, 3)); })
                .rfind("[rotary_embedding] expects an even head dim", 0), 0u);
  EXPECT_EQ(msg([&] { ops::rotary_embedding(x, c.narrow(0, 0, 4), s); }).rfind("[rotary_embedding] cos of shape [4, 4]", 0), 0u);
  EXPECT_EQ(msg([&] { ops::rotary_embedding(x, c, s.reshape({5, 2, 2})); }).rfind("[rotary_embedding] sin of shape", 0), 0u);
  auto dmsg = [](auto f) { return test::message_of<DTypeError>(f); };
  EXPECT_EQ(dmsg([&] { ops::rotary_embedding(x, c.to(DType::f64), s); }).rfind("[rotary_embedding] cos has dtype f64", 0), 0u);
  EXPECT_EQ(dmsg([&] { ops::rotary_embedding(x.to(DType::bf16), c.to(DType::bf16), s); }).rfind("[rotary_embedding] cos has dtype bf16", 0), 0u);
  EXPECT_EQ(dmsg([&] { ops::rotary_embedding(x.to(DType::i64), c, s); }).rfind("[rotary_embedding] expects a floating-point x", 0), 0u);
  // An empty batch is an empty result.
  EXPECT_EQ(ops::rotary_embedding(randn({0, 5, 3, 8}), c, s).sizes(), (Shape{0, 5, 3, 8}));
}

// ---- swiglu ----

TEST(SwigluOps, MatchesTorchF64) {
  Tensor gate = ref("swiglu.gate_base").transpose(0, 2), up = ref("swiglu.up");
  ASSERT_FALSE(gate.is_contiguous());
  Tensor y = ops::swiglu_forward(gate, up);
  EXPECT_TRUE(y.is_contiguous());
  EXPECT_TRUE(all_close(y, ref("swiglu.y"), 1e-13, 1e-14));
  ops::SwigluBackward b = ops::swiglu_backward(ref("swiglu.gy"), gate, up, {true, true});
  EXPECT_TRUE(all_close(b.dgate, ref("swiglu.dgate_base").transpose(0, 2).contiguous(), 1e-13, 1e-14));
  EXPECT_TRUE(all_close(b.dup, ref("swiglu.dup"), 1e-13, 1e-14));
}

TEST(SwigluOps, EveryDtypeAndLayout) {
  manual_seed(43);
  for (DType dt : {DType::f64, DType::f32, DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor fused = randn({6, 2 * 40}).mul(3.0).to(dt);  // [gate | up] of one projection
    Tensor big = randn({2, 33000}).mul(3.0).to(dt);      // > the CPU's parallel grain
    const std::vector<std::tuple<const char*, Tensor, Tensor>> cases = {
        {"contiguous", randn({5, 7}).mul(3.0).to(dt), randn({5, 7}).to(dt)},
        {"halves of a fused projection", fused.slice(1, 0, 40), fused.slice(1, 40, 80)},
        {"transposed gate", randn({7, 5}).mul(3.0).to(dt).transpose(0, 1), randn({5, 7}).to(dt)},
        {"large", big.select(0, 0), big.select(0, 1)},
    };
    for (const auto& [name, gate, up] : cases) {
      SCOPED_TRACE(name);
      Tensor grad = randn(gate.sizes()).to(dt);
      const SwigluRef r = swiglu_ref(gate, up, grad);
      const double tol = ulp_tol(dt);
      Tensor y = ops::swiglu_forward(gate, up);
      EXPECT_EQ(y.dtype(), dt);
      EXPECT_TRUE(all_close(y, r.y, tol, tol));
      ops::SwigluBackward b = ops::swiglu_backward(grad, gate, up, {true, true});
      EXPECT_TRUE(all_close(b.dgate, r.dgate, tol, tol));
      EXPECT_TRUE(all_close(b.dup, r.dup, tol, tol));
      // One gradient at a time: the other is left undefined.
      ops::SwigluBackward bg = ops::swiglu_backward(grad, gate, up, {true, false});
      EXPECT_FALSE(bg.dup.defined());
      EXPECT_TRUE(all_close(bg.dgate, r.dgate, tol, tol));
      Tensor strided_grad = stack({grad, grad}, -1).select(-1, 0);  // the same values, stride 2
      ops::SwigluBackward bu = ops::swiglu_backward(strided_grad, gate, up, {false, true});
      EXPECT_FALSE(bu.dgate.defined());
      EXPECT_TRUE(all_close(bu.dup, r.dup, tol, tol));
    }
  }
}

TEST(SwigluOps, ExtremeGates) {
  // sigmoid saturates without NaN: silu(-100) = -0 (times up), silu(100) = 100.
  Tensor gate = tensor<float>({-100.f, -20.f, 0.f, 20.f, 100.f}, {5});
  Tensor up = full({5}, 2.0);
  Tensor grad = full({5}, 1.0);
  const SwigluRef r = swiglu_ref(gate, up, grad);
  EXPECT_TRUE(all_close(ops::swiglu_forward(gate, up), r.y, 1e-6, 1e-6));
  ops::SwigluBackward b = ops::swiglu_backward(grad, gate, up, {true, true});
  EXPECT_TRUE(all_close(b.dgate, r.dgate, 1e-6, 1e-6));
  EXPECT_TRUE(all_close(b.dup, r.dup, 1e-6, 1e-6));
}

TEST(SwigluOps, Errors) {
  EXPECT_EQ(test::message_of<ShapeError>([] { ops::swiglu_forward(randn({3, 4}), randn({4, 3})); })
                .rfind("[swiglu] gate of shape [3, 4] and up of shape [4, 3] must have the same shape", 0),
            0u);
  EXPECT_EQ(test::message_of<DTypeError>([] { ops::swiglu_forward(randn({3}), randn({3}, DType::f64)); })
                .rfind("[swiglu] gate has dtype f32 but up has dtype f64", 0),
            0u);
  EXPECT_EQ(test::message_of<DTypeError>([] {
              ops::swiglu_forward(zeros({3}, DType::i64), zeros({3}, DType::i64));
            }).rfind("[swiglu] expects floating-point", 0),
            0u);
  EXPECT_EQ(test::message_of<ShapeError>([] {
              ops::swiglu_backward(randn({2}), randn({3}), randn({3}), {true, true});
            }).rfind("[swiglu_backward] gradient of shape [2]", 0),
            0u);
}

// ---- CUDA against the CPU ----
// Each layout is a view built the same way from a base tensor on each device (a copy to the
// device would be contiguous and aligned, and test only the fast path).

using View = std::function<Tensor(const Tensor&)>;

TEST(RopeSwigluCuda, RopeMatchesCpu) {
  EMBER_SKIP_WITHOUT_CUDA();
  const Device dev = Device::cuda(0);
  manual_seed(44);
  const auto tables = rope_cos_sin(80, 128, 10000.0);
  const std::vector<std::tuple<const char*, Shape, View>> layouts = {
      // D/2 = 4: 16-byte access only for f32 and f64; the scalar kernel for 16 bits.
      {"small head", {2, 5, 3, 8}, [](const Tensor& b) { return b; }},
      {"contiguous, 16-byte access", {3, 33, 4, 128}, [](const Tensor& b) { return b; }},
      {"transposed [B, H, T, D], 16-byte access", {2, 4, 33, 128},
       [](const Tensor& b) { return b.transpose(1, 2); }},
      {"strided along D", {2, 4, 33, 128},
       [](const Tensor& b) { return b.slice(3, 0, 128, 2).transpose(1, 2); }},
      {"misaligned start", {2 * 33 * 4 * 64 + 1},
       [](const Tensor& b) { return b.narrow(0, 1, 2 * 33 * 4 * 64).view({2, 33, 4, 64}); }},
      {"one head group of a fused qkv", {2, 33, 3 * 4 * 64},
       [](const Tensor& b) { return b.view({2, 33, 12, 64}).slice(2, 4, 8); }},
  };
  for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
    SCOPED_TRACE(dtype_name(dt));
    const double rtol = test::cuda_rtol(dt);
    const DType table_dt = dt == DType::f64 ? DType::f64 : DType::f32;
    for (const auto& [name, shape, view] : layouts) {
      SCOPED_TRACE(name);
      Tensor base = randn(shape).to(dt);
      Tensor x = view(base), gx = view(base.to(dev));
      const int64_t T = x.size(1), half = x.size(3) / 2;
      Tensor c = tables.first.to(table_dt).narrow(0, 80 - T, T).narrow(1, 0, half);
      Tensor s = tables.second.to(table_dt).narrow(0, 80 - T, T).narrow(1, 0, half);
      for (bool inverse : {false, true}) {
        Tensor cpu = ops::rotary_embedding(x, c, s, inverse);
        Tensor gpu = ops::rotary_embedding(gx, c.to(dev), s.to(dev), inverse);
        EXPECT_TRUE(gpu.device().is_cuda());
        EXPECT_TRUE(gpu.is_contiguous());
        EXPECT_TRUE(test::close_to_cpu(gpu, cpu, rtol));
      }
    }
  }
}

TEST(RopeSwigluCuda, SwigluMatchesCpu) {
  EMBER_SKIP_WITHOUT_CUDA();
  const Device dev = Device::cuda(0);
  manual_seed(45);
  using Split = std::function<std::pair<Tensor, Tensor>(const Tensor&)>;
  const std::vector<std::tuple<const char*, Shape, Split>> cases = {
      {"contiguous, 16-byte access, a tail", {2, 1003},
       [](const Tensor& b) { return std::pair{b.select(0, 0), b.select(0, 1)}; }},
      {"large", {2, 64, 4096}, [](const Tensor& b) { return std::pair{b.select(0, 0), b.select(0, 1)}; }},
      {"misaligned", {2 * 1003 + 1},
       [](const Tensor& b) { return std::pair{b.narrow(0, 1, 1003), b.narrow(0, 1004, 1003)}; }},
      {"halves of a fused projection", {33, 400},
       [](const Tensor& b) { return std::pair{b.slice(1, 0, 200), b.slice(1, 200, 400)}; }},
      {"transposed", {2, 37, 29},
       [](const Tensor& b) { return std::pair{b.select(0, 0).transpose(0, 1), b.select(0, 1).transpose(0, 1)}; }},
  };
  for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
    SCOPED_TRACE(dtype_name(dt));
    const double rtol = test::cuda_rtol(dt);
    for (const auto& [name, shape, split] : cases) {
      SCOPED_TRACE(name);
      Tensor base = randn(shape).mul(3.0).to(dt);
      const auto [gate, up] = split(base);
      const auto [gg, gu] = split(base.to(dev));
      Tensor grad = randn(gate.sizes()).to(dt);
      EXPECT_TRUE(test::close_to_cpu(ops::swiglu_forward(gg, gu), ops::swiglu_forward(gate, up), rtol));
      for (std::array<bool, 2> needs : {std::array<bool, 2>{true, true}, {true, false}, {false, true}}) {
        ops::SwigluBackward c = ops::swiglu_backward(grad, gate, up, needs);
        ops::SwigluBackward g = ops::swiglu_backward(grad.to(dev), gg, gu, needs);
        EXPECT_TRUE(test::close_to_cpu(g.dgate, c.dgate, 4 * rtol));
        EXPECT_TRUE(test::close_to_cpu(g.dup, c.dup, 4 * rtol));
      }
    }
  }
}
