// CPU driver for the fused SwiGLU (kernels/swiglu.h has the preconditions), on the shared
// elementwise iteration engine (loops.h: coalesced strides, OpenMP above its grain).
//
// The math is fn::swiglu / fn::swiglu_backward (functors.h, shared with the CUDA driver) in the
// compute type C; its exp is, for float, ember's branch-free fast_math version, so the
// unit-stride loops vectorize; libm's for double.
#include <array>
#include <cstdint>

#include "ember/ops/functors.h"
#include "kernels/swiglu.h"
#include "loops.h"

namespace ember::ops::cpu {

namespace {

template <class S>
void swiglu_fwd(const Tensor& gate, const Tensor& up, const Tensor& out) {
  using C = compute_t<S>;
  for_each_element<3>({&out, &gate, &up}, [](std::array<char*, 3> p, std::array<int64_t, 3> s,
                                             int64_t n) {
    constexpr int64_t e = sizeof(S);
    if (s[0] == e && s[1] == e && s[2] == e) {
      S* o = reinterpret_cast<S*>(p[0]);
      const S* g = reinterpret_cast<const S*>(p[1]);
      const S* u = reinterpret_cast<const S*>(p[2]);
      for (int64_t i = 0; i < n; ++i) {
        o[i] = S(fn::swiglu(C(g[i]), C(u[i])));
      }
    } else {
      for (int64_t i = 0; i < n; ++i) {
        const C gv = C(*reinterpret_cast<const S*>(p[1] + i * s[1]));
        const C uv = C(*reinterpret_cast<const S*>(p[2] + i * s[2]));
        *reinterpret_cast<S*>(p[0] + i * s[0]) = S(fn::swiglu(gv, uv));
      }
    }
  });
}

// Operands: {dgate or dup, dup or dgate, grad, gate, up}; an output not requested is replaced
// by the other one (the plan needs a tensor) and never written.
template <class S, bool kGate, bool kUp>
void swiglu_bwd(const Tensor& grad, const Tensor& gate, const Tensor& up, const Tensor& dgate,
                const Tensor& dup) {
  using C = compute_t<S>;
  const Tensor& o0 = kGate ? dgate : dup;
  const Tensor& o1 = kUp ? dup : dgate;
  for_each_element<5>({&o0, &o1, &grad, &gate, &up}, [](std::array<char*, 5> p,
                                                       std::array<int64_t, 5> s, int64_t n) {
    constexpr int64_t e = sizeof(S);
    auto at = [&](int k, int64_t i) { return reinterpret_cast<S*>(p[k] + i * s[k]); };
    bool unit = true;
    for (int k = 0; k < 5; ++k) unit = unit && s[k] == e;
    if (unit) {
      S* dg = reinterpret_cast<S*>(p[0]);
      S* du = reinterpret_cast<S*>(p[1]);
      const S* gr = reinterpret_cast<const S*>(p[2]);
      const S* g = reinterpret_cast<const S*>(p[3]);
      const S* u = reinterpret_cast<const S*>(p[4]);
      for (int64_t i = 0; i < n; ++i) {
        const fn::SwigluGrads<C> d = fn::swiglu_backward(C(gr[i]), C(g[i]), C(u[i]));
        if constexpr (kGate) dg[i] = S(d.dgate);
        if constexpr (kUp) du[i] = S(d.dup);
      }
    } else {
      for (int64_t i = 0; i < n; ++i) {
        const fn::SwigluGrads<C> d = fn::swiglu_backward(C(*at(2, i)), C(*at(3, i)), C(*at(4, i)));
        if constexpr (kGate) *at(0, i) = S(d.dgate);
        if constexpr (kUp) *at(1, i) = S(d.dup);
      }
    }
  });
}

}  // namespace

void swiglu_fwd_kernel(const Tensor& gate, const Tensor& up, const Tensor& out) {
  visit_floating(gate.dtype(), [&](auto tag) { swiglu_fwd<decltype(tag)>(gate, up, out); });
}

void swiglu_bwd_kernel(const Tensor& grad, const Tensor& gate, const Tensor& up,
                       const Tensor& dgate, const Tensor& dup) {
  visit_floating(gate.dtype(), [&](auto tag) {
    using S = decltype(tag);
    if (dgate.defined() && dup.defined()) swiglu_bwd<S, true, true>(grad, gate, up, dgate, dup);
    else if (dgate.defined()) swiglu_bwd<S, true, false>(grad, gate, up, dgate, dup);
    else swiglu_bwd<S, false, true>(grad, gate, up, dgate, dup);
  });
}

}  // namespace ember::ops::cpu
