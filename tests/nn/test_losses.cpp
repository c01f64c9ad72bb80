// The losses against PyTorch (tests/fixtures/loss_reference.txt from make_loss_fixtures.py):
// every loss with every reduction, class weights, pos_weight broadcast, ignore_index with
// weights, [N, C, d1, d2], probability targets with label smoothing; forward and gradients,
// on strided (non-contiguous) inputs. Then gradcheck (f64), the modules, the errors, and the
// CUDA results against the CPU.
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <ember/nn.h>

#include "support/test_support.h"

namespace ember::test {
namespace {

namespace F = nn::functional;
const char* kRef = "loss_reference.txt";
Tensor fixture(const std::string& name, DType dt = DType::f64) { return load_fixture(kRef, name).tensor(dt); }

struct Strided {
  Tensor base, view;
};
// A strided view (stride 2 in the last dim) of t's values; its base collects the gradient.
Strided strided_leaf(const Tensor& t) {
  Shape s = t.sizes();
  s.push_back(2);
  Tensor base = t.unsqueeze(-1).expand(s).contiguous().detach();
  base.requires_grad_(true);
  return {base, base.select(-1, 0)};
}

Reduction reduction_of(const std::string& r) {
  if (r == "none") return Reduction::none;
  if (r == "sum") return Reduction::sum;
  if (r == "batchmean") return Reduction::batchmean;
  return Reduction::mean;
}

using LossFn = std::function<Tensor(const TensorList&, Reduction)>;
const std::vector<std::string> kReductions = {"none", "mean", "sum"};

// fn on the fixture's inputs (the first ndiff floating ones as strided views that require
// grad) for each reduction; the loss and those inputs' gradients against
// loss.<name>.<reduction>[.d<i>].
void check_loss(const std::string& name, const TensorList& inputs, const LossFn& fn,
                const std::vector<std::string>& reductions = kReductions, double rtol = 1e-10,
                size_t ndiff = 2) {
  for (const std::string& r : reductions) {
    SCOPED_TRACE(name + "." + r);
    TensorList xs, bases;
    for (const Tensor& t : inputs) {
      if (t.is_floating_point() && xs.size() < ndiff) {
        Strided s = strided_leaf(t);
        ASSERT_TRUE(t.dim() == 0 || !s.view.is_contiguous());
        xs.push_back(s.view);
        bases.push_back(s.base);
      } else {
        xs.push_back(t);
        bases.push_back(Tensor());
      }
    }
    Tensor out = fn(xs, reduction_of(r));
    EXPECT_TRUE(all_close(out, fixture("loss." + name + "." + r), rtol, 1e-12));
    Tensor total = r == "none" ? (out * fixture("loss." + name + ".gnone")).sum() : out;
    total.backward();
    for (size_t i = 0; i < bases.size(); ++i) {
      if (!bases[i].defined()) continue;
      SCOPED_TRACE("d" + std::to_string(i));
      ASSERT_TRUE(bases[i].grad().defined());
      EXPECT_TRUE(all_close(bases[i].grad().select(-1, 0), fixture("loss." + name + "." + r + ".d" + std::to_string(i)),
                            rtol, 1e-12));
    }
  }
}

TEST(Losses, RegressionMatchPyTorch) {
  const TensorList ab = {fixture("loss.a"), fixture("loss.b")};
  check_loss("mse", ab, [](const TensorList& in, Reduction r) { return F::mse_loss(in[0], in[1], r); });
  check_loss("l1", ab, [](const TensorList& in, Reduction r) { return F::l1_loss(in[0], in[1], r); });
  check_loss("smooth_l1", ab, [](const TensorList& in, Reduction r) { return F::smooth_l1_loss(in[0], in[1], r); });
  check_loss("smooth_l1_b05", ab,
             [](const TensorList& in, Reduction r) { return F::smooth_l1_loss(in[0], in[1], r, 0.5); });
  check_loss("smooth_l1_b0", ab,
             [](const TensorList& in, Reduction r) { return F::smooth_l1_loss(in[0], in[1], r, 0.0); });
  check_loss("huber", ab, [](const TensorList& in, Reduction r) { return F::huber_loss(in[0], in[1], r, 0.7); });
}

TEST(Losses, BinaryCrossEntropyMatchPyTorch) {
  const TensorList pq = {fixture("loss.p"), fixture("loss.q")};
  const Tensor w4 = fixture("loss.w4"), pw4 = fixture("loss.pw4");
  check_loss("bce", pq, [](const TensorList& in, Reduction r) { return F::binary_cross_entropy(in[0], in[1], {}, r); });
  check_loss("bce_w", pq,
             [&](const TensorList& in, Reduction r) { return F::binary_cross_entropy(in[0], in[1], w4, r); });
  // Probabilities 0 and 1 (log clamped at -100) and a tiny one: finite loss and PyTorch's
  // finite gradient (x - t) / max(x (1 - x), 1e-12). (PyTorch's 1e-12 is a float constant,
  // 1 - 4e-9 of ours: hence the tolerance.)
  check_loss("bce_edge", {fixture("loss.pe"), fixture("loss.qe")},
             [](const TensorList& in, Reduction r) { return F::binary_cross_entropy(in[0], in[1], {}, r); }, {"sum"},
             1e-8, 1);

  const TensorList aq = {fixture("loss.a"), fixture("loss.q")};
  check_loss("bce_logits", aq, [](const TensorList& in, Reduction r) {
    return F::binary_cross_entropy_with_logits(in[0], in[1], {}, r);
  });
  // pos_weight [4] broadcast along the last dim of [3, 4].
  check_loss("bce_logits_pw", aq, [&](const TensorList& in, Reduction r) {
    return F::binary_cross_entropy_with_logits(in[0], in[1], {}, r, pw4);
  });
  check_loss("bce_logits_w_pw", aq, [&](const TensorList& in, Reduction r) {
    return F::binary_cross_entropy_with_logits(in[0], in[1], w4, r, pw4);
  });
  // Logits up to about +-100: the stable form neither overflows nor loses the small side.
  check_loss("bce_logits_big", {fixture("loss.big"), fixture("loss.q")}, [&](const TensorList& in, Reduction r) {
    return F::binary_cross_entropy_with_logits(in[0], in[1], {}, r, pw4);
  });
}

TEST(Losses, KlDivMatchPyTorch) {
  const std::vector<std::string> all = {"none", "mean", "sum", "batchmean"};
  // The target has a 0 entry: xlogy(0, 0) = 0, and its gradient is finite.
  check_loss("kl_div", {fixture("loss.klx"), fixture("loss.kly")},
             [](const TensorList& in, Reduction r) { return F::kl_div(in[0], in[1], r); }, all, 1e-10, 1);
  check_loss("kl_div_log", {fixture("loss.klx"), fixture("loss.kllog")},
             [](const TensorList& in, Reduction r) { return F::kl_div(in[0], in[1], r, true); }, all);
}

TEST(Losses, NllLossMatchPyTorch) {
  const Tensor tgt = fixture("loss.tgt", DType::i64), w3 = fixture("loss.w3");
  check_loss("nll", {fixture("loss.logp"), tgt},
             [](const TensorList& in, Reduction r) { return F::nll_loss(in[0], in[1], {.reduction = r}); });
  // Class weights with an ignored target: the mean divides by the kept targets' weights.
  check_loss("nll_w", {fixture("loss.logp"), tgt}, [&](const TensorList& in, Reduction r) {
    return F::nll_loss(in[0], in[1], {.weight = w3, .reduction = r});
  });
  // [N, C, d1, d2] with weights and ignore_index = 1.
  check_loss("nll_nd_w", {fixture("loss.logp4"), fixture("loss.tgt4", DType::i64)}, [&](const TensorList& in, Reduction r) {
    return F::nll_loss(in[0], in[1], {.weight = w3, .ignore_index = 1, .reduction = r});
  });
  // [C] with a 0-dim target.
  check_loss("nll_1d", {fixture("loss.logp1"), scalar_tensor(2, DType::i64)}, [&](const TensorList& in, Reduction r) {
    return nn::NLLLoss({.weight = w3, .reduction = r})(in[0], in[1]);
  });
  // The older positional form still works.
  EXPECT_TRUE(all_close(F::nll_loss(fixture("loss.logp"), tgt, -100, Reduction::sum), fixture("loss.nll.sum"), 1e-12, 0));
}

TEST(Losses, CrossEntropyMatchPyTorch) {
  const Tensor logits = fixture("loss.logits"), tgt = fixture("loss.tgt", DType::i64), w3 = fixture("loss.w3");
  const Tensor logits4 = fixture("loss.logits4"), tgt4 = fixture("loss.tgt4", DType::i64);
  check_loss("ce_w", {logits, tgt}, [&](const TensorList& in, Reduction r) {
    return F::cross_entropy(in[0], in[1], {.weight = w3, .reduction = r});
  });
  check_loss("ce_w_ls", {logits, tgt}, [&](const TensorList& in, Reduction r) {
    return F::cross_entropy(in[0], in[1], {.weight = w3, .reduction = r, .label_smoothing = 0.2});
  });
  // The fused path, unchanged.
  check_loss("ce_ls", {logits, tgt}, [&](const TensorList& in, Reduction r) {
    return F::cross_entropy(in[0], in[1], {.reduction = r, .label_smoothing = 0.2});
  });
  // [N, C, d1, d2]: unweighted through the fused kernel, weighted as the composite.
  check_loss("ce_nd", {logits4, tgt4}, [&](const TensorList& in, Reduction r) {
    return F::cross_entropy(in[0], in[1], {.ignore_index = 1, .reduction = r, .label_smoothing = 0.1});
  });
  check_loss("ce_nd_w", {logits4, tgt4}, [&](const TensorList& in, Reduction r) {
    return F::cross_entropy(in[0], in[1], {.weight = w3, .ignore_index = 2, .reduction = r, .label_smoothing = 0.1});
  });
  // Probability targets (their gradient too), with smoothing and weights, and [N, C, d1, d2].
  check_loss("ce_prob", {logits, fixture("loss.probs")},
             [&](const TensorList& in, Reduction r) { return F::cross_entropy(in[0], in[1], {.reduction = r}); });
  check_loss("ce_prob_w_ls", {logits, fixture("loss.probs")}, [&](const TensorList& in, Reduction r) {
    return nn::CrossEntropyLoss({.weight = w3, .reduction = r, .label_smoothing = 0.15})(in[0], in[1]);
  });
  check_loss("ce_prob_nd", {logits4, fixture("loss.probs4")}, [&](const TensorList& in, Reduction r) {
    return F::cross_entropy(in[0], in[1], {.reduction = r, .label_smoothing = 0.1});
  });
}

TEST(Losses, FusedAndCompositeCrossEntropyAgree) {
  // Unit class weights take the composite path; they must equal the fused kernel's result,
  // in f32 too, with ignored targets and smoothing.
  manual_seed(2);
  Tensor x = randn({6, 5, 3});
  Tensor t = tensor<int64_t>({0, 4, -100, 2, 1, 3, 3, -100, 0, 4, 1, 2, 0, 0, 1, 2, 3, 4}, {6, 3});
  for (Reduction r : {Reduction::none, Reduction::mean, Reduction::sum}) {
    Tensor fused = F::cross_entropy(x, t, {.reduction = r, .label_smoothing = 0.1});
    Tensor composite = F::cross_entropy(x, t, {.weight = ones({5}), .reduction = r, .label_smoothing = 0.1});
    EXPECT_TRUE(all_close(fused, composite, 1e-5, 1e-6));
  }
}

TEST(Losses, PassGradcheck) {
  manual_seed(9);
  using autograd::gradcheck;
  Tensor a = randn({3, 4}, DType::f64).requires_grad_();
  Tensor b = randn({3, 4}, DType::f64).requires_grad_();
  auto check2 = [&](const std::function<Tensor(const Tensor&, const Tensor&)>& f, const Tensor& x, const Tensor& y) {
    return gradcheck([&](const TensorList& in) { return f(in[0], in[1]); }, {x, y});
  };
  EXPECT_TRUE(check2([](auto& x, auto& y) { return F::mse_loss(x, y); }, a, b));
  EXPECT_TRUE(check2([](auto& x, auto& y) { return F::l1_loss(x, y, Reduction::sum); }, a, b));
  EXPECT_TRUE(check2([](auto& x, auto& y) { return F::smooth_l1_loss(x, y, Reduction::none, 0.5); }, a, b));
  EXPECT_TRUE(check2([](auto& x, auto& y) { return F::huber_loss(x, y, Reduction::mean, 0.7); }, a, b));
  Tensor p = (rand({3, 4}, DType::f64) * 0.8 + 0.1).detach().requires_grad_();
  Tensor q = rand({3, 4}, DType::f64).requires_grad_();
  Tensor w4 = rand({4}, DType::f64) + 0.5;
  EXPECT_TRUE(check2([&](auto& x, auto& y) { return F::binary_cross_entropy(x, y, w4); }, p, q));
  EXPECT_TRUE(check2([&](auto& x, auto& y) {
    return F::binary_cross_entropy_with_logits(x, y, w4, Reduction::none, w4 * 2.0);
  }, a, q));
  Tensor lp = log_softmax(randn({3, 4}, DType::f64), 1).detach().requires_grad_();
  Tensor pt = softmax(randn({3, 4}, DType::f64), 1).detach().requires_grad_();
  EXPECT_TRUE(check2([](auto& x, auto& y) { return F::kl_div(x, y, Reduction::batchmean); }, lp, pt));
  EXPECT_TRUE(check2([](auto& x, auto& y) { return F::kl_div(x, y, Reduction::none, true); }, lp, b));
  // Cross entropy: weighted + smoothing, [N, C, d] fused, probability targets (both inputs).
  Tensor logits = randn({4, 3, 2}, DType::f64).requires_grad_();
  Tensor t = tensor<int64_t>({0, 2, 1, -100, 2, 2, 0, 1}, {4, 2});
  Tensor w3 = tensor<double>({0.5, 2.0, 1.0});
  EXPECT_TRUE(gradcheck([&](const TensorList& in) {
    return F::cross_entropy(in[0], t, {.weight = w3, .label_smoothing = 0.2});
  }, {logits}));
  EXPECT_TRUE(gradcheck([&](const TensorList& in) {
    return F::cross_entropy(in[0], t, {.reduction = Reduction::none, .label_smoothing = 0.2});
  }, {logits}));
  Tensor probs = softmax(randn({4, 3, 2}, DType::f64), 1).detach().requires_grad_();
  EXPECT_TRUE(gradcheck([&](const TensorList& in) {
    return F::cross_entropy(in[0], in[1], {.weight = w3, .label_smoothing = 0.1});
  }, {logits, probs}));
  EXPECT_TRUE(gradcheck([&](const TensorList& in) {
    return F::nll_loss(in[0], t, {.weight = w3, .reduction = Reduction::sum});
  }, {logits}));
}

TEST(Losses, ModulesMatchFunctional) {
  const Tensor a = fixture("loss.a"), b = fixture("loss.b"), p = fixture("loss.p"), q = fixture("loss.q");
  const Tensor w4 = fixture("loss.w4"), pw4 = fixture("loss.pw4");
  EXPECT_TRUE(all_close(nn::MSELoss()(a, b), fixture("loss.mse.mean"), 1e-12, 0));
  EXPECT_TRUE(all_close(nn::L1Loss(Reduction::sum)(a, b), fixture("loss.l1.sum"), 1e-12, 0));
  EXPECT_TRUE(all_close(nn::SmoothL1Loss(Reduction::mean, 0.5)(a, b), fixture("loss.smooth_l1_b05.mean"), 1e-12, 0));
  EXPECT_TRUE(all_close(nn::HuberLoss(Reduction::none, 0.7)(a, b), fixture("loss.huber.none"), 1e-12, 0));
  EXPECT_TRUE(all_close(nn::BCELoss(w4)(p, q), fixture("loss.bce_w.mean"), 1e-12, 0));
  nn::BCEWithLogitsLoss bce_logits(w4, Reduction::sum, pw4);
  EXPECT_TRUE(all_close(bce_logits(a, q), fixture("loss.bce_logits_w_pw.sum"), 1e-12, 0));
  EXPECT_TRUE(all_close(nn::KLDivLoss(Reduction::batchmean)(fixture("loss.klx"), fixture("loss.kly")),
                        fixture("loss.kl_div.batchmean"), 1e-12, 0));
  // Weights are buffers (saved, moved by to()), under PyTorch's names.
  std::vector<std::string> names;
  for (auto& [name, t] : bce_logits.named_buffers()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"weight", "pos_weight"}));
  nn::CrossEntropyLoss ce({.weight = fixture("loss.w3").to(DType::f32)});
  ce.to(DType::f64);
  EXPECT_EQ(ce.options.weight.dtype(), DType::f64);
  // (The weights went through f32.)
  EXPECT_TRUE(all_close(ce(fixture("loss.logits"), fixture("loss.tgt", DType::i64)), fixture("loss.ce_w.mean"), 1e-7, 0));
  EXPECT_EQ(nn::KLDivLoss(Reduction::batchmean, true).repr(), "KLDivLoss(reduction=batchmean, log_target=True)");
  // A loss module has no one-argument forward.
  nn::Module& m = ce;
  EXPECT_NE(message_of<NotImplementedError>([&] { m(a); }).find("[CrossEntropyLoss] has no forward"),
            std::string::npos);
}

// PyTorch refuses what the formula would turn into NaN and huge gradients, and names the loss
// (not the gather underneath) for a target out of range.
TEST(Losses, OutOfRangeInputsAndTargetsAreRefusedNamingTheLoss) {
  const Tensor t = rand({2, 3});
  for (double bad : {-0.5, 1.5, std::nan("")}) {
    Tensor x = full({2, 3}, 0.5);
    x.narrow(1, 2, 1).fill_(bad);
    const std::string msg = message_of<ValueError>([&] { F::binary_cross_entropy(x, t); });
    EXPECT_NE(msg.find("[binary_cross_entropy] all elements of input should be between 0 and 1"), std::string::npos)
        << bad << ": " << msg;
  }
  // The bounds themselves are probabilities: log(0) is clamped to -100 as in PyTorch.
  EXPECT_TRUE(std::isfinite(F::binary_cross_entropy(tensor<float>({0.0f, 1.0f}), tensor<float>({1.0f, 0.0f})).item<double>()));
  const Tensor logp = log_softmax(randn({3, 5}), 1);
  const std::string msg = message_of<IndexError>([&] { F::nll_loss(logp, tensor<int64_t>({0, 7, 2})); });
  EXPECT_NE(msg.find("[nll_loss] target 7 at position 1 is out of bounds for 5 classes"), std::string::npos) << msg;
  // An ignored entry may hold any value; a negative target that is not ignore_index may not.
  EXPECT_NO_THROW(F::nll_loss(logp, tensor<int64_t>({0, -100, 2})));
  EXPECT_NE(message_of<IndexError>([&] { F::nll_loss(logp, tensor<int64_t>({0, -1, 2})); }).find("[nll_loss] target -1"),
            std::string::npos);
}

// Options written in PyTorch's argument order compile (designated initializers must follow
// the declaration order), and the options forms equal the positional ones.
TEST(Losses, OptionsInPyTorchsArgumentOrder) {
  const Tensor logits = randn({4, 5}), t = tensor<int64_t>({0, 4, 2, 1}), w = rand({5}) + 0.5;
  const Tensor ce = F::cross_entropy(logits, t, {.weight = w, .ignore_index = 2, .reduction = Reduction::sum,
                                                 .label_smoothing = 0.1});
  CrossEntropyOptions positional;
  positional.weight = w;
  positional.ignore_index = 2;
  positional.reduction = Reduction::sum;
  positional.label_smoothing = 0.1;
  EXPECT_TRUE(test::all_close(ce, F::cross_entropy(logits, t, positional), 0, 0));
  const Tensor logp = log_softmax(logits, 1);
  EXPECT_TRUE(test::all_close(F::nll_loss(logp, t, {.weight = w, .ignore_index = -1}),
                              F::nll_loss(logp, t, NLLLossOptions{w, -1, Reduction::mean}), 0, 0));
  const Tensor x = randn({3, 5}), y = rand({3, 5}), pw = rand({5}) + 0.5;
  EXPECT_TRUE(test::all_close(F::binary_cross_entropy_with_logits(x, y, {.reduction = Reduction::sum, .pos_weight = pw}),
                              F::binary_cross_entropy_with_logits(x, y, Tensor(), Reduction::sum, pw), 0, 0));
  EXPECT_TRUE(test::all_close(F::binary_cross_entropy(sigmoid(x), y, {.weight = pw, .reduction = Reduction::none}),
                              F::binary_cross_entropy(sigmoid(x), y, pw, Reduction::none), 0, 0));
}

TEST(Losses, BadInputsThrowNamingTheOp) {
  Tensor a = randn({3, 4}), b = randn({3, 4});
  Tensor logits = randn({3, 5});
  Tensor t = tensor<int64_t>({0, 4, 2});
  auto has = [](const std::string& msg, const std::string& op) {
    return msg.find("[" + op + "]") != std::string::npos ? ::testing::AssertionSuccess()
                                                          : ::testing::AssertionFailure() << msg;
  };
  EXPECT_TRUE(has(message_of<ShapeError>([&] { F::mse_loss(a, randn({4, 3})); }), "mse_loss"));
  EXPECT_TRUE(has(message_of<ShapeError>([&] { F::l1_loss(a, randn({3, 1})); }), "l1_loss"));
  EXPECT_TRUE(has(message_of<DTypeError>([&] { F::smooth_l1_loss(a, ones({3, 4}, DType::i64)); }), "smooth_l1_loss"));
  EXPECT_TRUE(has(message_of<ValueError>([&] { F::huber_loss(a, b, Reduction::mean, 0.0); }), "huber_loss"));
  EXPECT_TRUE(has(message_of<ShapeError>([&] { F::binary_cross_entropy(sigmoid(a), rand({4})); }),
                  "binary_cross_entropy"));
  EXPECT_TRUE(has(message_of<ShapeError>([&] { F::binary_cross_entropy(sigmoid(a), rand({3, 4}), ones({5})); }),
                  "binary_cross_entropy"));
  EXPECT_TRUE(has(message_of<ShapeError>([&] {
    F::binary_cross_entropy_with_logits(a, rand({3, 4}), {}, Reduction::mean, ones({3}));
  }), "binary_cross_entropy_with_logits"));
  EXPECT_TRUE(has(message_of<DTypeError>([&] { F::kl_div(a, ones({3, 4}, DType::i64)); }), "kl_div"));
  EXPECT_TRUE(has(message_of<DTypeError>([&] { F::nll_loss(log_softmax(logits, 1), zeros({3})); }), "nll_loss"));
  EXPECT_TRUE(has(message_of<ShapeError>([&] { F::nll_loss(randn({2, 3, 4}), zeros({2, 3}, DType::i64)); }),
                  "nll_loss"));
  EXPECT_TRUE(has(message_of<ShapeError>([&] { F::nll_loss(logits, t, {.weight = ones({4})}); }), "nll_loss"));
  EXPECT_TRUE(has(message_of<DTypeError>([&] { F::cross_entropy(logits, rand({3, 4})); }), "cross_entropy"));
  EXPECT_TRUE(has(message_of<ShapeError>([&] { F::cross_entropy(randn({2, 5, 3}), t); }), "cross_entropy"));
  EXPECT_TRUE(has(message_of<ShapeError>([&] { F::cross_entropy(logits, t, {.weight = ones({3})}); }),
                  "cross_entropy"));
  EXPECT_TRUE(has(message_of<ValueError>([&] { F::cross_entropy(logits, softmax(logits, 1), {.ignore_index = 0}); }),
                  "cross_entropy"));
  // batchmean belongs to kl_div alone.
  EXPECT_TRUE(has(message_of<ValueError>([&] { F::mse_loss(a, b, Reduction::batchmean); }), "mse_loss"));
  EXPECT_TRUE(has(message_of<ValueError>([&] { F::cross_entropy(logits, t, {.reduction = Reduction::batchmean}); }),
                  "cross_entropy"));
  EXPECT_TRUE(has(message_of<ValueError>([&] {
    F::nll_loss(log_softmax(logits, 1), t, {.reduction = Reduction::batchmean});
  }), "nll_loss"));
  EXPECT_TRUE(has(message_of<ValueError>([&] { F::binary_cross_entropy(sigmoid(a), rand({3, 4}), {}, Reduction::batchmean); }),
                  "binary_cross_entropy"));
}

// CUDA against the CPU: the composites run on the device's elementwise, reduction and
// indexing kernels (and the fused cross-entropy for [N, C, d]).
// The CPU's refusals, on CUDA without a host wait: raised at the next synchronization (the
// loss's item()) with the CPU's message and type, and the record cleared after.
TEST(LossesCuda, OutOfRangeInputsAndTargetsAreRefusedAtTheNextSync) {
  EMBER_SKIP_WITHOUT_CUDA();
  const Device dev = Device::cuda(0);
  const Tensor t = rand({2, 3}).to(dev);
  for (double bad : {-0.5, 1.5, std::nan("")}) {
    Tensor x = full({2, 3}, 0.5);
    x.narrow(1, 2, 1).fill_(bad);
    const std::string cpu = message_of<ValueError>([&] { F::binary_cross_entropy(x, t.cpu()); });
    const std::string msg = message_of<ValueError>([&] { (void)F::binary_cross_entropy(x.to(dev), t).item<double>(); });
    EXPECT_EQ(msg, cpu) << bad;
    EXPECT_NO_THROW(cuda::synchronize());
  }
  EXPECT_NO_THROW((void)F::binary_cross_entropy(full({2, 3}, 1.0, dev), t).item<double>());
  const Tensor logp = log_softmax(randn({3, 5}), 1);
  const Tensor target = tensor<int64_t>({0, 7, 2});
  const std::string cpu = message_of<IndexError>([&] { F::nll_loss(logp, target); });
  const std::string msg = message_of<IndexError>([&] { (void)F::nll_loss(logp.to(dev), target.to(dev)).item<double>(); });
  EXPECT_EQ(msg, cpu);  // "[nll_loss] target 7 at position 1 ...", not the gather kernel's "[gather]"
  EXPECT_NO_THROW(cuda::synchronize());
  EXPECT_NO_THROW((void)F::nll_loss(logp.to(dev), tensor<int64_t>({0, -100, 2}).to(dev)).item<double>());
}

TEST(LossesCuda, MatchCpu) {
  EMBER_SKIP_WITHOUT_CUDA();
  const Device dev = Device::cuda(0);
  const Tensor a = fixture("loss.a"), q = fixture("loss.q"), p = fixture("loss.p"), w4 = fixture("loss.w4"), pw4 = fixture("loss.pw4");
  const Tensor w3 = fixture("loss.w3"), logits4 = fixture("loss.logits4"), tgt4 = fixture("loss.tgt4", DType::i64);
  const Tensor probs4 = fixture("loss.probs4"), klx = fixture("loss.klx"), kly = fixture("loss.kly");
  using Fn = std::function<Tensor(const Tensor&, const Tensor&, Device)>;
  const std::vector<std::pair<std::string, Fn>> cases = {
      {"bce", [&](const Tensor& x, const Tensor& y, Device d) { return F::binary_cross_entropy(x, y, w4.to(d)); }},
      {"bce_logits", [&](const Tensor& x, const Tensor& y, Device d) {
         return F::binary_cross_entropy_with_logits(x, y, w4.to(d), Reduction::none, pw4.to(d));
       }},
      {"kl_div", [&](const Tensor& x, const Tensor& y, Device) { return F::kl_div(x, y, Reduction::batchmean); }},
      {"ce_nd", [&](const Tensor& x, const Tensor& y, Device) {
         return F::cross_entropy(x, y, {.ignore_index = 1, .label_smoothing = 0.1});
       }},
      {"ce_nd_w", [&](const Tensor& x, const Tensor& y, Device d) {
         return F::cross_entropy(x, y, {.weight = w3.to(d), .ignore_index = 2, .reduction = Reduction::sum, .label_smoothing = 0.1});
       }},
      {"ce_prob_nd", [&](const Tensor& x, const Tensor& y, Device d) {
         return F::cross_entropy(x, y, {.weight = w3.to(d), .label_smoothing = 0.1});
       }},
      {"smooth_l1", [&](const Tensor& x, const Tensor& y, Device) { return F::smooth_l1_loss(x, y, Reduction::none, 0.5); }},
  };
  const std::vector<std::pair<Tensor, Tensor>> inputs = {{p, q}, {a, q}, {klx, kly}, {logits4, tgt4},
                                                         {logits4, tgt4}, {logits4, probs4}, {a, q}};
  for (DType dt : {DType::f64, DType::f32}) {
    for (size_t i = 0; i < cases.size(); ++i) {
      SCOPED_TRACE(cases[i].first + " " + std::string(dtype_name(dt)));
      auto [x, y] = inputs[i];
      Tensor yc = y.is_floating_point() ? y.to(dt) : y;
      Tensor xc = x.to(dt).detach().requires_grad_(true);
      Tensor xg = x.to(dev, dt).detach().requires_grad_(true);
      Tensor lc = cases[i].second(xc, yc, Device::cpu());
      Tensor lg = cases[i].second(xg, yc.to(dev), dev);
      EXPECT_TRUE(close_to_cpu(lg, lc, cuda_rtol(dt) * 10));
      lc.sum().backward();
      lg.sum().backward();
      EXPECT_TRUE(close_to_cpu(xg.grad(), xc.grad(), cuda_rtol(dt) * 10));
    }
  }
}

}  // namespace
}  // namespace ember::test
