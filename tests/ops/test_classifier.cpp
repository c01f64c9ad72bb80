// Forward of the fused classifier linear_cross_entropy (Note [fused classifier memory]):
// the loss against the composite it replaces (linear, slice to the V used classes,
// cross_entropy) in f32 and f64, with padded columns, ignored targets, all targets ignored,
// sum and mean, leading dims and non-contiguous inputs; the saved dlogits against a host loop;
// bad inputs; no-grad keeps nothing. CUDA bodies compare the CUDA path with the CPU one (f32,
// bf16 under autocast, unaligned rows, GPT-2's padded vocabulary, > 2^31 logits) and skip
// without a device.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <ember/ops/classifier.h>

#include "support/classifier_composite.h"
#include "support/test_support.h"

using namespace ember;

namespace {

struct Tol {
  double rtol, atol;
};
Tol tol_for(DType t) { return t == DType::f64 ? Tol{1e-12, 1e-12} : Tol{2e-5, 2e-5}; }

// Targets in [0, classes) with every third one set to `ignore`.
Tensor targets(const Shape& shape, int64_t classes, int64_t ignore) {
  Tensor t = randint(0, classes, shape);
  std::vector<int64_t> v = t.to_vector<int64_t>();
  for (size_t i = 0; i < v.size(); i += 3) v[i] = ignore;
  return tensor<int64_t>(v, shape);
}

}  // namespace

TEST(Classifier, LossMatchesCompositeWithPaddingIgnoreAndReductions) {
  manual_seed(11);
  const int64_t n = 37, c = 16, vp = 24, v = 19;
  for (DType dt : {DType::f64, DType::f32}) {
    Tensor x = randn({n, c}, dt).mul(0.7);
    Tensor w = randn({vp, c}, dt).mul(0.7);
    // The padded rows of w hold large logits: they must not take part.
    Tensor wpad = w.clone();
    wpad.narrow(0, v, vp - v).fill_(5.0);
    Tensor t = targets({n}, v, -1);
    for (Reduction r : {Reduction::mean, Reduction::sum}) {
      SCOPED_TRACE(str(dtype_name(dt), " reduction ", int(r)));
      Tensor got = linear_cross_entropy(x, wpad, t, {.ignore_index = -1, .num_classes = v, .reduction = r});
      Tensor want = classifier_composite(x, wpad, t, v, -1, r);
      EXPECT_EQ(got.dtype(), dt);
      EXPECT_EQ(got.sizes(), Shape{});
      const Tol tl = tol_for(dt);
      EXPECT_TRUE(test::all_close(got, want, tl.rtol, tl.atol));
      // num_classes = -1: every row of w is a class (here the padded ones too).
      EXPECT_TRUE(test::all_close(linear_cross_entropy(x, wpad, t, {.ignore_index = -1, .reduction = r}),
                                  classifier_composite(x, wpad, t, vp, -1, r), tl.rtol, tl.atol));
    }
  }
}

TEST(Classifier, LossLeadingDimsNonContiguousAndOneRow) {
  manual_seed(12);
  const int64_t b = 3, tt = 5, c = 8, vp = 16, v = 13;
  Tensor w = randn({vp, c}, DType::f64);
  Tensor t = targets({b, tt}, v, -100);
  // [B, T, C] contiguous, and the same values as a transposed (non-contiguous) view.
  Tensor x = randn({b, tt, c}, DType::f64);
  Tensor xs = x.transpose(1, 2).contiguous().transpose(1, 2);
  ASSERT_FALSE(xs.is_contiguous());
  Tensor want = classifier_composite(x, w, t, v, -100, Reduction::mean);
  EXPECT_TRUE(test::all_close(linear_cross_entropy(x, w, t, {.num_classes = v}), want, 1e-12, 1e-12));
  EXPECT_TRUE(test::all_close(linear_cross_entropy(xs, w, t, {.num_classes = v}), want, 1e-12, 1e-12));
  // A non-contiguous weight (a transposed view) and a strided target.
  Tensor wt = w.t().contiguous().t();
  Tensor t2 = stack({t, t}, 2).select(2, 1);
  ASSERT_FALSE(t2.is_contiguous());
  EXPECT_TRUE(test::all_close(linear_cross_entropy(x, wt, t2, {.num_classes = v}), want, 1e-12, 1e-12));
  // One sample: x [C], target [].
  Tensor x1 = randn({c}, DType::f64);
  Tensor t1 = scalar_tensor(4, DType::i64);
  Tensor l1 = linear(x1, w).narrow(0, 0, v);
  EXPECT_TRUE(test::all_close(linear_cross_entropy(x1, w, t1, {.num_classes = v}),
                              cross_entropy(l1.reshape({1, v}), t1.reshape({1})), 1e-12, 1e-12));
}

TEST(Classifier, AllIgnoredAndEmpty) {
  Tensor x = randn({4, 6}), w = randn({9, 6});
  Tensor t = full({4}, -100, DType::i64);
  // PyTorch (and the composite): the mean over no targets is NaN, the sum 0.
  EXPECT_TRUE(std::isnan(classifier_composite(x, w, t, 7, -100, Reduction::mean).item<double>()));
  EXPECT_TRUE(std::isnan(linear_cross_entropy(x, w, t, {.num_classes = 7}).item<double>()));
  EXPECT_EQ(linear_cross_entropy(x, w, t, {.num_classes = 7, .reduction = Reduction::sum}).item<double>(), 0.0);
  Tensor e = zeros({0, 6});
  Tensor te = zeros({0}, DType::i64);
  EXPECT_TRUE(std::isnan(linear_cross_entropy(e, w, te).item<double>()));
  EXPECT_EQ(linear_cross_entropy(e, w, te, {.reduction = Reduction::sum}).item<double>(), 0.0);
}

// The saved buffer: softmax over the V used columns minus the one-hot, 0 in the padded
// columns and in ignored rows, without the 1/count (the backward applies it); the factor is
// 1/count for mean, 1 for sum; a no-grad forward keeps neither.
TEST(Classifier, SavedDlogitsAgainstHostLoop) {
  manual_seed(13);
  const int64_t n = 9, c = 5, vp = 12, v = 10;
  Tensor x = randn({n, c}, DType::f64), w = randn({vp, c}, DType::f64);
  Tensor t = targets({n}, v, -100);
  ops::LinearCrossEntropyForward f =
      ops::linear_cross_entropy_forward(x, w, t, {.num_classes = v}, true);
  ASSERT_TRUE(f.dlogits.defined());
  EXPECT_EQ(f.dlogits.sizes(), Shape({n, vp}));
  const std::vector<double> logits = linear(x, w).to_vector<double>();
  const std::vector<int64_t> tv = t.to_vector<int64_t>();
  std::vector<double> want(size_t(n * vp), 0.0);
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (tv[size_t(i)] == -100) continue;
    ++kept;
    double m = -std::numeric_limits<double>::infinity(), s = 0;
    for (int64_t k = 0; k < v; ++k) m = std::max(m, logits[size_t(i * vp + k)]);
    for (int64_t k = 0; k < v; ++k) s += std::exp(logits[size_t(i * vp + k)] - m);
    for (int64_t k = 0; k < v; ++k)
      want[size_t(i * vp + k)] = std::exp(logits[size_t(i * vp + k)] - m) / s - (k == tv[size_t(i)] ? 1 : 0);
  }
  EXPECT_TRUE(test::all_close(f.dlogits, {n, vp}, want, 1e-12, 1e-14));
  EXPECT_NEAR(f.grad_factor.item<double>(), 1.0 / double(kept), 1e-15);
  ops::LinearCrossEntropyForward fs = ops::linear_cross_entropy_forward(
      x, w, t, {.num_classes = v, .reduction = ops::LossReduction::sum}, true);
  EXPECT_EQ(fs.grad_factor.item<double>(), 1.0);
  ops::LinearCrossEntropyForward nograd = ops::linear_cross_entropy_forward(x, w, t, {.num_classes = v}, false);
  EXPECT_FALSE(nograd.dlogits.defined());
  EXPECT_FALSE(nograd.grad_factor.defined());
  EXPECT_TRUE(test::all_close(nograd.loss, f.loss, 0, 0));
}

TEST(Classifier, BadInputs) {
  Tensor x = randn({2, 4}), w = randn({8, 4});
  auto expect_message = [](auto&& fn, const std::string& part) {
    try {
      fn();
      ADD_FAILURE() << "expected an exception mentioning " << part;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("[linear_cross_entropy]"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  // Out of [0, V): cross_entropy's IndexError, a padded class included.
  Tensor big = tensor<int64_t>({0, 6}, {2});
  EXPECT_THROW(linear_cross_entropy(x, w, big, {.num_classes = 6}), IndexError);
  expect_message([&] { linear_cross_entropy(x, w, big, {.num_classes = 6}); },
                 "target 6 at position 1 is out of bounds for 6 classes");
  EXPECT_NO_THROW(linear_cross_entropy(x, w, big));  // all 8 rows are classes
  Tensor neg = tensor<int64_t>({-1, 0}, {2});
  EXPECT_THROW(linear_cross_entropy(x, w, neg), IndexError);
  EXPECT_NO_THROW(linear_cross_entropy(x, w, neg, {.ignore_index = -1}));
  EXPECT_THROW(linear_cross_entropy(x, w, tensor<float>({0, 1}, {2})), DTypeError);
  EXPECT_THROW(linear_cross_entropy(x, w.to(DType::f64), tensor<int64_t>({0, 1}, {2})), DTypeError);
  EXPECT_THROW(linear_cross_entropy(x, randn({8, 5}), tensor<int64_t>({0, 1}, {2})), ShapeError);
  EXPECT_THROW(linear_cross_entropy(x, w, tensor<int64_t>({0, 1, 2}, {3})), ShapeError);
  EXPECT_THROW(linear_cross_entropy(x, w, tensor<int64_t>({0, 1}, {2}), {.num_classes = 9}), ValueError);
  EXPECT_THROW(linear_cross_entropy(x, w, tensor<int64_t>({0, 1}, {2}), {.num_classes = 0}), ValueError);
  expect_message([&] { linear_cross_entropy(x, w, tensor<int64_t>({0, 1}, {2}), {.reduction = Reduction::none}); },
                 "reduction none");
  EXPECT_THROW(linear_cross_entropy(x, w, tensor<int64_t>({0, 1}, {2}), {.reduction = Reduction::none}),
               NotImplementedError);
}

// f16 holds at most 65504. 4096 rows of one class with x = 16 and p(class) ~ 0: the unscaled
// dW row sums 4096 * (p - 1) * 16 ~ -65536, beyond f16, while the gradient (the mean) is
// ~ -16. Scaling after the GEMMs gave -inf, so a GradScaler skipped every step; the scale
// goes first in f16 (issue 40, item 9). Against the f64 composite on the same rounded inputs,
// on every device.
TEST(Classifier, F16GradientOfAFrequentClassDoesNotOverflow) {
  for (const Device dev : test::test_devices()) {
    if (test::missing_device(dev)) continue;  // the CPU half still counts
    SCOPED_TRACE(dev.str());
    const int64_t n = 4096, c = 4, v = 8;
    Tensor x = full({n, c}, 16.0, TensorOptions(DType::f16));
    Tensor w = zeros({v, c}, TensorOptions(DType::f16));
    w.select(0, 0).fill_(-1.0);  // class 0's logit -64: p(0) ~ 1e-28, and every target is 0
    const Tensor t = zeros({n}, TensorOptions(DType::i64));
    Tensor xd = x.to(dev).detach().requires_grad_(), wd = w.to(dev).detach().requires_grad_();
    linear_cross_entropy(xd, wd, t.to(dev)).backward();
    const Tensor dw = wd.grad().cpu();
    EXPECT_TRUE(dw.isfinite().all().item<bool>()) << "dW overflowed f16: " << dw.select(0, 0);
    // The reference: the composite in f64 from the same values.
    Tensor x64 = x.to(DType::f64).detach().requires_grad_(), w64 = w.to(DType::f64).detach().requires_grad_();
    cross_entropy(linear(x64, w64), t).backward();
    EXPECT_TRUE(test::all_close(dw, w64.grad().to(DType::f16), 2e-3, 1e-3));
    EXPECT_TRUE(test::all_close(xd.grad().cpu(), x64.grad().to(DType::f16), 2e-3, 1e-6));
    EXPECT_LT(dw.select(0, 0).select(0, 0).item<double>(), -15.0);  // ~ -16: the mean's scale
  }
}

// ---------------------------------------------------------------- CUDA against the CPU

namespace {

struct Run {
  Tensor loss, dx, dw;
};
// Loss and gradients (on the CPU) of the fused op on `dev`, from f32 host inputs.
Run run_on(Device dev, const Tensor& x, const Tensor& w, const Tensor& t, const LinearCrossEntropyOptions& o,
           std::optional<DType> autocast_dtype = std::nullopt) {
  Tensor xd = x.to(dev).detach().requires_grad_();
  Tensor wd = w.to(dev).detach().requires_grad_();
  Tensor loss;
  if (autocast_dtype) {
    amp::autocast ac(dev, *autocast_dtype);
    loss = linear_cross_entropy(xd, wd, t.to(dev), o);
  } else {
    loss = linear_cross_entropy(xd, wd, t.to(dev), o);
  }
  loss.backward();
  return {loss.cpu(), xd.grad().cpu(), wd.grad().cpu()};
}

// rtol/atol for the gradients (atol per unit of the mean's 1/n); the loss within loss_rtol.
void expect_cuda_matches_cpu(int64_t n, int64_t c, int64_t vp, int64_t v, std::optional<DType> ac, double rtol,
                             double atol, double loss_rtol) {
  manual_seed(21);
  Tensor x = randn({n, c}), w = randn({vp, c}).mul(0.5);
  Tensor t = targets({n}, v, -1);
  const LinearCrossEntropyOptions o{.ignore_index = -1, .num_classes = v};
  cuda::AllowTF32Guard exact(false);
  Run cpu = run_on(Device::cpu(), x, w, t, o, ac);
  Run gpu = run_on(Device::cuda(), x, w, t, o, ac);
  EXPECT_EQ(gpu.loss.dtype(), DType::f32);
  EXPECT_TRUE(test::all_close(gpu.loss, cpu.loss, loss_rtol, 0));
  EXPECT_TRUE(test::all_close(gpu.dx, cpu.dx, rtol, atol / double(n)));
  EXPECT_TRUE(test::all_close(gpu.dw, cpu.dw, rtol, atol / double(n)));
  // The padded classes get exactly no gradient.
  if (v < vp) {
    EXPECT_EQ(gpu.dw.narrow(0, v, vp - v).abs().max().item<double>(), 0.0);
  }
}

}  // namespace

TEST(ClassifierCuda, MatchesCpuF32) {
  EMBER_SKIP_WITHOUT_CUDA();
  expect_cuda_matches_cpu(70, 32, 64, 61, std::nullopt, 1e-4, 1e-5, 1e-5);  // vectorized, masked pack
  // 1025 packs: 512 threads, each loading 2 packs per step; the second step has one pack.
  expect_cuda_matches_cpu(9, 16, 4100, 4097, std::nullopt, 1e-4, 1e-5, 1e-5);
}

TEST(ClassifierCuda, MatchesCpuUnalignedRows) {
  EMBER_SKIP_WITHOUT_CUDA();
  // Vp not a multiple of 4 (f32) / 8 (bf16): the scalar path.
  expect_cuda_matches_cpu(33, 24, 1001, 1001, std::nullopt, 1e-4, 1e-5, 1e-5);
  expect_cuda_matches_cpu(33, 24, 1003, 997, DType::bf16, 3e-2, 3e-2, 2e-3);
}

TEST(ClassifierCuda, MatchesCpuBf16Autocast) {
  EMBER_SKIP_WITHOUT_CUDA();
  expect_cuda_matches_cpu(130, 64, 512, 509, DType::bf16, 3e-2, 3e-2, 2e-3);
}

TEST(ClassifierCuda, MatchesCpuGpt2Vocabulary) {
  EMBER_SKIP_WITHOUT_CUDA();
  // The CUDA simulation runs a vocabulary of the same form at 1/50 the size: padded to a
  // multiple of 64 with random weights in the padding, whose logits the softmax must skip
  // (the padding-mask mutant of scripts/sim_mutants.py survives every other case).
  const bool sim = cuda::is_simulated();
  const int64_t vp = sim ? 1024 : 50304, v = sim ? 1001 : 50257;
  expect_cuda_matches_cpu(48, 64, vp, v, DType::bf16, 3e-2, 3e-2, 2e-3);
  expect_cuda_matches_cpu(48, 64, vp, v, std::nullopt, 1e-4, 1e-5, 1e-5);
}

// A NaN logit makes the loss NaN (as on the CPU and in PyTorch) even where the thread holding
// it is merged first with one that saw only -inf logits: f32, 64 classes in 16-byte packs, so
// thread 0 holds classes 0-3 (class 0 NaN) and thread 1 classes 4-7 (all -inf).
TEST(ClassifierCuda, NanLogitBesideMaskedClassesGivesNanLoss) {
  EMBER_SKIP_WITHOUT_CUDA();
  std::vector<float> xv(8, 0.f), wv = randn({64, 8}).to_vector<float>();
  xv[0] = 1.f;  // logit c = w[c][0] exactly
  wv[0] = std::numeric_limits<float>::quiet_NaN();
  for (int c = 4; c < 8; ++c) wv[size_t(c) * 8] = -std::numeric_limits<float>::infinity();
  Tensor x = tensor<float>(xv, {1, 8}), w = tensor<float>(wv, {64, 8}), t = tensor<int64_t>({10}, {1});
  EXPECT_TRUE(std::isnan(linear_cross_entropy(x, w, t).item<double>())) << "the CPU reference";
  EXPECT_TRUE(std::isnan(linear_cross_entropy(x.to(Device::cuda()), w.to(Device::cuda()), t.to(Device::cuda()))
                             .item<double>()));
}

TEST(ClassifierCuda, AllIgnoredAndBadTargetDeferred) {
  EMBER_SKIP_WITHOUT_CUDA();
  Tensor x = randn({4, 8}, Device::cuda()), w = randn({16, 8}, Device::cuda());
  Tensor none = full({4}, -1, TensorOptions(DType::i64).device(Device::cuda()));
  EXPECT_TRUE(std::isnan(linear_cross_entropy(x, w, none, {.ignore_index = -1}).item<double>()));
  // All ignored with grad: the gradients are 0, not NaN.
  Tensor xg = x.detach().requires_grad_();
  linear_cross_entropy(xg, w, none, {.ignore_index = -1, .reduction = Reduction::sum}).backward();
  EXPECT_EQ(xg.grad().abs().max().item<double>(), 0.0);
  // A target in the padded classes: IndexError with the CPU's message at the next sync.
  Tensor bad = tensor<int64_t>({0, 1, 14, 2}, {4}).to(Device::cuda());
  try {
    linear_cross_entropy(x, w, bad, {.num_classes = 13}).item<double>();
    ADD_FAILURE() << "a bad target must raise";
  } catch (const IndexError& e) {
    EXPECT_NE(std::string(e.what()).find("[linear_cross_entropy] target 14 at position 2 is out of bounds for 13 classes"),
              std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(cuda::synchronize());  // the record was cleared
}

// More than 2^31 logits (GPT-2 at B = 16 has 0.82e9; larger batches cross 2^31): the whole
// batch's sum equals the sum of its chunks' (each chunk far below 2^31).
TEST(ClassifierCuda, MoreThan2Pow31Logits) {
  EMBER_SKIP_WITHOUT_CUDA();
  const int64_t vp = 50304, v = 50257, c = 64;
  const int64_t n = (int64_t(1) << 31) / vp + 256;
  ASSERT_GT(n * vp, int64_t(1) << 31);
  manual_seed(22);
  const Device dev = Device::cuda();
  Tensor x = randn({n, c}, dev).to(DType::bf16);
  Tensor w = randn({vp, c}, dev).mul(0.3).to(DType::bf16);
  Tensor t = randint(0, v, {n}, TensorOptions(DType::i64).device(dev));
  NoGradGuard ng;
  const LinearCrossEntropyOptions o{.num_classes = v, .reduction = Reduction::sum};
  const double whole = linear_cross_entropy(x, w, t, o).item<double>();
  double parts = 0;
  const int64_t chunk = 4096;
  for (int64_t s = 0; s < n; s += chunk) {
    const int64_t len = std::min(chunk, n - s);
    parts += linear_cross_entropy(x.narrow(0, s, len), w, t.narrow(0, s, len), o).item<double>();
  }
  EXPECT_NEAR(whole, parts, 1e-5 * std::abs(parts));
}
