// CPU driver for the fused SwiGLU (kernels/swiglu.h has the preconditions), on the shared
// elementwise iteration engine (loops.h: coalesced strides, OpenMP above its grain).
//
// The math is in the compute type C; exp is fn::exp (functors.h): for float, ember's
// branch-free fast_math version, so the unit-stride loops vectorize; libm's for double.
#include <array>
#include <cstdint>

#include "ember/ops/functors.h"
#include "kernels/swiglu.h"
#include "loops.h"

namespace ember::ops::cpu {

namespace {

template <class C>
EMBER_FORCEINLINE C sigmoid_of(C g) {
  return C(1) / (C(1) + fn::exp(-g));
}

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
        const C gv = C(g[i]);
        o[i] = S(gv * sigmoid_of(gv) * C(u[i]));
      }
    } else {
      for (int64_t i = 0; i < n; ++i) {
        const C gv = C(*reinterpret_cast<const S*>(p[1] + i * s[1]));
        const C uv = C(*reinterpret_cast<const S*>(p[2] + i * s[2]));
        *reinterpret_cast<S*>(p[0] + i * s[0]) = S(gv * sigmoid_of(gv) * uv);
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
        const C gv = C(g[i]), go = C(gr[i]), sig = sigmoid_of(gv);
        if constexpr (kGate) dg[i] = S(go * C(u[i]) * sig * (C(1) + gv * (C(1) - sig)));
        if constexpr (kUp) du[i] = S(go * gv * sig);
      }
    } else {
      for (int64_t i = 0; i < n; ++i) {
        const C gv = C(*at(3, i)), go = C(*at(2, i)), sig = sigmoid_of(gv);
        if constexpr (kGate) *at(0, i) = S(go * C(*at(4, i)) * sig * (C(1) + gv * (C(1) - sig)));
        if constexpr (kUp) *at(1, i) = S(go * gv * sig);
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
