// gradcheck: the analytical Jacobian (one backward per output element, or random projections
// for large outputs) against central finite differences in f64, input by input.
#include <cmath>

#include "ember/autograd/engine.h"
#include "ember/factory.h"
#include "ember/functions.h"
#include "ember/grad_mode.h"

namespace ember::autograd {

namespace {
// Host address of flat element i of a CPU tensor (row-major over its sizes).
double* element(const Tensor& t, int64_t i) {
  int64_t off = 0;
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    off += (i % t.sizes()[d]) * t.strides()[d];
    i /= t.sizes()[d];
  }
  return static_cast<double*>(t.data_ptr()) + off;
}

std::vector<double> flat(const Tensor& t) { return t.to_vector<double>(); }
}  // namespace

bool gradcheck(const std::function<Tensor(const TensorList&)>& fn, const TensorList& inputs,
               const GradcheckOptions& opt) {
  std::vector<size_t> checked;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    if (!t.defined() || !t.requires_grad()) continue;
    EMBER_CHECK(t.dtype() == DType::f64, DTypeError, "[gradcheck] input ", uint64_t(i),
                " has dtype ", t.dtype(), "; finite differences need f64");
    EMBER_CHECK(t.is_cpu(), DeviceError, "[gradcheck] input ", uint64_t(i), " is on ",
                t.device(), "; gradcheck perturbs inputs on the CPU");
    for (int64_t d = 0; d < t.dim(); ++d)
      EMBER_CHECK(t.strides()[d] != 0 || t.sizes()[d] <= 1, ValueError, "[gradcheck] input ",
                  uint64_t(i), " has overlapping memory (an expanded view); pass a clone");
    checked.push_back(i);
  }
  EMBER_CHECK(!checked.empty(), ValueError, "[gradcheck] no input requires grad");
  TensorList wrt;
  for (size_t i : checked) wrt.push_back(inputs[i]);

  Tensor out = fn(inputs);
  EMBER_CHECK(out.dtype() == DType::f64, DTypeError, "[gradcheck] output has dtype ",
              out.dtype(), "; expected f64");
  const int64_t m = out.numel();
  // Projections: unit vectors for small outputs (the full Jacobian), else random directions.
  const bool full = m <= 256;
  const int64_t nproj = full ? m : 8;
  std::vector<std::vector<double>> dirs;
  for (int64_t r = 0; r < nproj; ++r) {
    if (full) {
      std::vector<double> e(size_t(m), 0.0);
      e[size_t(r)] = 1.0;
      dirs.push_back(std::move(e));
    } else {
      dirs.push_back(flat(randn({m}, DType::f64)));
    }
  }
  // analytic[r][k] = (dir_r^T J)_k for each checked input k.
  std::vector<TensorList> analytic;
  for (auto& d : dirs) {
    Tensor v = tensor(d, out.sizes());
    Tensor o = fn(inputs);
    analytic.push_back(grad({o}, wrt, {v}, false, false, /*allow_unused=*/true));
  }

  for (size_t k = 0; k < wrt.size(); ++k) {
    const Tensor& x = wrt[k];
    std::vector<std::vector<double>> an;
    for (auto& row : analytic) {
      an.push_back(row[k].defined() ? flat(row[k]) : std::vector<double>(size_t(x.numel()), 0.0));
    }
    for (int64_t e = 0; e < x.numel(); ++e) {
      double* p = element(x, e);
      const double orig = *p;
      std::vector<double> plus, minus;
      {
        NoGradGuard no_grad;
        *p = orig + opt.eps;
        plus = flat(fn(inputs));
        *p = orig - opt.eps;
        minus = flat(fn(inputs));
        *p = orig;
      }
      for (size_t r = 0; r < dirs.size(); ++r) {
        double numeric = 0;
        for (int64_t j = 0; j < m; ++j)
          numeric += dirs[r][size_t(j)] * (plus[size_t(j)] - minus[size_t(j)]) / (2 * opt.eps);
        const double a = an[r][size_t(e)];
        if (!(std::fabs(a - numeric) <= opt.atol + opt.rtol * std::fabs(numeric)))
          throw AutogradError(str("[gradcheck] Jacobian mismatch for input ", uint64_t(checked[k]),
                                  " (shape ", x.sizes(), ") element ", e, ", ",
                                  full ? "output element " : "projection ", int64_t(r),
                                  ": numerical ", numeric, " vs analytical ", a));
      }
    }
  }
  return true;
}

}  // namespace ember::autograd
