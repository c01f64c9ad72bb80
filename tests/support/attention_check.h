// The error budgets and the closeness check of the attention tests against an f64 reference
// (tests/ops/test_attention.cpp, tests/ops/test_flash_attention_cuda.cpp), with tolerances
// derived from the rounding.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <ember/ember.h>

// Unit roundoff of the storage dtype: half an ulp of 1.
inline double unit_roundoff(ember::DType dt) {
  switch (dt) {
    case ember::DType::f16: return std::ldexp(1.0, -11);
    case ember::DType::bf16: return std::ldexp(1.0, -8);
    case ember::DType::f32: return std::ldexp(1.0, -24);
    default: return std::ldexp(1.0, -53);
  }
}

// The error budget of one attention output or gradient, relative to its scale, when the kernel
// computes in f32 over `n` terms from inputs already rounded to `dt`:
// - 16-bit: the result is rounded once on store (u), and the tensor-core operands P and dS are
//   rounded to 16 bits before their products (about u per term, random in sign, so about u
//   relative to the sum's own scale, not growing with n); 3u covers both with room for the
//   row statistics (lse, D = rowsum(dO * O)) computed from rounded operands.
// - f32 accumulation over n terms in another order: about sqrt(n) f32 roundoffs (random walk);
//   8 sqrt(n) u32 leaves room for exp/log differences of a few ulps.
inline double attention_budget(ember::DType dt, int64_t n) {
  const double u = unit_roundoff(dt);
  const double u32 = unit_roundoff(ember::DType::f32);
  return (dt == ember::DType::f32 ? 0.0 : 3 * u) + 8 * std::sqrt(double(n)) * u32;
}

// The budget of lse = m + log(l) from a kernel that computes it in f32 from the exact
// products of the rounded inputs (no 16-bit rounding of its own): f32-sized, so an lse off by
// a small constant (a wrong log base or scale folded in twice) is caught, not only through the
// backward.
inline double attention_lse_budget(int64_t n) {
  return std::ldexp(1.0, -14) + 8 * std::sqrt(double(n)) * std::ldexp(1.0, -24);
}

// The magnitudes of the terms behind each element of dq and dk (f64, shaped as q and k), for
// the 16-bit element check. dq_i = scale sum_j dS_ij k_j with dS = P (dP - Delta), and the
// FlashAttention algorithm rounds twice by design: dS to 16 bits before the product (u |dS_ij|
// per term) and Delta = rowsum(dO * O) read from the 16-bit output (u sum_d |dO_id O_id| per
// row, times P_ij). Where those terms cancel (a query that sees two keys) an element is far
// below them and so is its rms floor, but its error is theirs: on the first GPU run dq of a
// second query was off by 0.8 u of its terms' 5.7, which a NumPy model of the kernel's
// roundings reproduced bit for bit (the rounded O alone moved it). So the element bound adds
// 2 u times these magnitudes: dq_mag = scale (|dS| + P c) |K|, dk_mag = scale (|dS| + P c)^T |Q|,
// c_i = sum_d |dO_id O_id|. q, k, v, g: the rounded inputs in f64 on the CPU, [B, H, T, D];
// `mask` (optional): an attn_mask on the CPU, bool (keep where true) or floating (added), as
// the attention fronts take it; a row it hides entirely has P = 0.
struct AttentionTermScales {
  ember::Tensor dq, dk;
};
inline AttentionTermScales attention_term_scales(const ember::Tensor& q, const ember::Tensor& k,
                                                 const ember::Tensor& v, const ember::Tensor& g, bool causal,
                                                 const ember::Tensor& mask = {}) {
  using namespace ember;
  NoGradGuard no_grad;
  const int64_t Tq = q.size(2), Tk = k.size(2);
  const double scale = 1.0 / std::sqrt(double(q.size(3)));
  constexpr double kInf = std::numeric_limits<double>::infinity();
  Tensor s = matmul(q, k.transpose(2, 3)) * scale;
  if (causal) s = where(ones({Tq, Tk}, DType::f64).tril(Tk - Tq).gt(0.5), s, -kInf);
  if (mask.defined()) s = mask.dtype() == DType::b8 ? where(mask, s, -kInf) : s + mask.to(DType::f64);
  Tensor p = softmax(s, 3);
  p = where(p.isnan(), 0.0, p);  // rows with no visible key
  const Tensor o = matmul(p, v);
  const Tensor ds = p * (matmul(g, v.transpose(2, 3)) - (g * o).sum(3, true));
  const Tensor w = ds.abs() + p * (g.abs() * o.abs()).sum(3, true);
  return {matmul(w, k.abs()) * scale, matmul(w.transpose(2, 3), q.abs()) * scale};
}

// Checks `got` (any dtype, any device) against the f64 `ref` within `budget`: in norm,
// ||got - ref|| <= budget ||ref||, and element by element, |got_i - ref_i| <= 4 budget
// (|ref_i| + rms(ref)) + 2 u term_mag_i (the rms floor: rounding errors scale with the row's
// terms, not with an element that happens to cancel to near zero; term_mag, when given, the
// per-element magnitudes of attention_term_scales and u the unit roundoff of got's dtype). A
// result scaled by 5% fails the norm check for the 16-bit dtypes (budget <= 1.2e-2); a single
// wrong element fails the second.
// A reference that is zero up to its own f64 rounding (dq and dk with one key: the softmax is
// constant) leaves only the residue of terms that cancel: |got_i| <= budget * zero_scale, the
// terms' magnitude.
inline ::testing::AssertionResult within_budget(const ember::Tensor& got, const ember::Tensor& ref,
                                                double budget, double zero_scale = 0,
                                                const ember::Tensor& term_mag = {}) {
  if (got.sizes() != ref.sizes())
    return ::testing::AssertionFailure() << "shape " << ember::str(got.sizes()) << " vs "
                                         << ember::str(ref.sizes());
  const std::vector<double> g = got.to(ember::Device::cpu(), ember::DType::f64).contiguous().to_vector<double>();
  const std::vector<double> r = ref.to(ember::Device::cpu(), ember::DType::f64).contiguous().to_vector<double>();
  double err2 = 0, ref2 = 0;
  for (size_t i = 0; i < r.size(); ++i) {
    err2 += (g[i] - r[i]) * (g[i] - r[i]);
    ref2 += r[i] * r[i];
  }
  if (r.empty()) return ::testing::AssertionSuccess();
  // The f64 reference of terms that cancel is their residue, about 2^-53 of them, not 0.
  if (ref2 == 0 || (zero_scale > 0 && std::sqrt(ref2 / double(r.size())) <= 64 * std::ldexp(zero_scale, -53))) {
    for (size_t i = 0; i < g.size(); ++i)
      if (!(std::fabs(g[i]) <= budget * zero_scale))
        return ::testing::AssertionFailure() << "element " << i << ": " << g[i] << " where the terms cancel to 0 "
                                             << "(allowed " << budget * zero_scale << ")";
    return ::testing::AssertionSuccess();
  }
  const double rms = std::sqrt(ref2 / double(r.size()));
  if (!(std::sqrt(err2) <= budget * std::sqrt(ref2)))
    return ::testing::AssertionFailure() << "relative error in norm " << std::sqrt(err2) / std::sqrt(ref2)
                                         << " > budget " << budget;
  std::vector<double> mag(r.size(), 0.0);
  if (term_mag.defined()) mag = term_mag.to(ember::Device::cpu(), ember::DType::f64).contiguous().to_vector<double>();
  const double u2 = 2 * unit_roundoff(got.dtype());
  for (size_t i = 0; i < r.size(); ++i)
    if (!(std::fabs(g[i] - r[i]) <= 4 * budget * (std::fabs(r[i]) + rms) + u2 * mag[i]))
      return ::testing::AssertionFailure() << "element " << i << ": " << g[i] << " vs " << r[i]
                                           << " (budget " << budget << ", rms " << rms
                                           << ", terms " << mag[i] << ")";
  return ::testing::AssertionSuccess();
}
