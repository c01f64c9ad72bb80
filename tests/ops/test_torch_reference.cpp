// Forward values and gradients against PyTorch 1.13 (tests/fixtures/torch_reference.txt, written
// by tests/fixtures/make_fixtures.py). Every case reads its inputs and the upstream gradient
// from the fixture, runs the ember op in f64 (tight tolerance) and in f32 (loose), and
// compares the output and, after backward with that upstream gradient, every input's
// gradient.
#include <functional>

#include "support/test_support.h"

using namespace ember;

namespace {
const char* kFile = "torch_reference.txt";

Tensor fixture(const std::string& c, const std::string& name, DType dtype = DType::f64) {
  return test::load_fixture(kFile, c + "." + name).tensor(dtype);
}

using Fn = std::function<Tensor(const TensorList&)>;

// Runs case `c`: differentiable inputs `names` (fixture arrays c.<name>), output c.y,
// upstream gradient c.gy, expected gradients c.g<name>.
void run_case(const std::string& c, const std::vector<std::string>& names, const Fn& fn,
              double rtol64 = 1e-9, double atol64 = 1e-12) {
  for (DType dt : {DType::f64, DType::f32}) {
    SCOPED_TRACE(c + " in " + dtype_name(dt));
    const double rtol = dt == DType::f64 ? rtol64 : 2e-4;
    const double atol = dt == DType::f64 ? atol64 : 2e-5;
    try {
      TensorList inputs;
      for (const std::string& n : names) inputs.push_back(fixture(c, n, dt).requires_grad_());
      Tensor y = fn(inputs);
      Tensor expected_y = fixture(c, "y");
      EXPECT_EQ(y.dtype(), dt);
      EXPECT_TRUE(test::all_close(y, expected_y, rtol, atol)) << "forward";
      y.backward(fixture(c, "gy", dt));
      for (size_t i = 0; i < names.size(); ++i) {
        ASSERT_TRUE(inputs[i].grad().defined()) << "no gradient for " << names[i];
        EXPECT_EQ(inputs[i].grad().dtype(), dt);
        EXPECT_TRUE(test::all_close(inputs[i].grad(), fixture(c, "g" + names[i]), rtol, atol))
            << "gradient of " << names[i];
      }
    } catch (const std::exception& e) {
      ADD_FAILURE() << c << " (" << dtype_name(dt) << ") threw: " << e.what();
    }
  }
}
}  // namespace

TEST(TorchReference, FixtureFileIsPresentAndSmall) {
  test::Fixture f = test::load_fixture(kFile, "gelu.x");
  EXPECT_EQ(f.shape, Shape({4, 5}));
  EXPECT_EQ(f.values.size(), 20u);
  EXPECT_THROW(test::load_fixture(kFile, "no_such_array"), IOError);
}

TEST(TorchReference, Activations) {
  run_case("gelu", {"x"}, [](const TensorList& t) { return t[0].gelu(); });
  run_case("gelu_tanh", {"x"}, [](const TensorList& t) { return ember::gelu(t[0], true); });
  run_case("silu", {"x"}, [](const TensorList& t) { return t[0].silu(); });
  run_case("sigmoid", {"x"}, [](const TensorList& t) { return t[0].sigmoid(); });
  run_case("tanh", {"x"}, [](const TensorList& t) { return t[0].tanh(); });
}

TEST(TorchReference, Softmax) {
  run_case("softmax_d1", {"x"}, [](const TensorList& t) { return t[0].softmax(1); });
  run_case("softmax_d0", {"x"}, [](const TensorList& t) { return ember::softmax(t[0], 0); });
  run_case("log_softmax_d1", {"x"}, [](const TensorList& t) { return t[0].log_softmax(-1); });
  run_case("log_softmax_d0", {"x"}, [](const TensorList& t) { return ember::log_softmax(t[0], 0); });
}

TEST(TorchReference, CrossEntropy) {
  const std::pair<const char*, Reduction> reductions[] = {
      {"mean", Reduction::mean}, {"sum", Reduction::sum}, {"none", Reduction::none}};
  for (auto [name, red] : reductions) {
    std::string r = name;
    CrossEntropyOptions plain{.reduction = red};
    CrossEntropyOptions ignore{.ignore_index = -100, .reduction = red};
    CrossEntropyOptions smooth{.reduction = red, .label_smoothing = 0.1};
    CrossEntropyOptions smooth_ignore{.ignore_index = 3, .reduction = red, .label_smoothing = 0.1};
    struct Variant {
      std::string c;
      CrossEntropyOptions o;
    };
    for (const Variant& v : {Variant{"ce_" + r, plain}, Variant{"ce_ignore_" + r, ignore},
                             Variant{"ce_smooth_" + r, smooth},
                             Variant{"ce_smooth_ignore_" + r, smooth_ignore}}) {
      Tensor target = fixture(v.c, "target", DType::i64);
      CrossEntropyOptions o = v.o;
      run_case(v.c, {"logits"}, [target, o](const TensorList& t) { return ember::cross_entropy(t[0], target, o); });
    }
  }
}

TEST(TorchReference, LayerNorm) {
  run_case("layer_norm", {"x", "w", "b"},
           [](const TensorList& t) { return ember::layer_norm(t[0], {6}, t[1], t[2], 1e-5); });
  run_case("layer_norm_2d", {"x", "w", "b"},
           [](const TensorList& t) { return ember::layer_norm(t[0], {3, 4}, t[1], t[2], 1e-5); });
}

TEST(TorchReference, Matmul) {
  run_case("matmul_batched", {"a", "b"}, [](const TensorList& t) { return t[0].matmul(t[1]); });
  run_case("matmul_2d", {"a", "b"}, [](const TensorList& t) { return ember::matmul(t[0], t[1]); });
  run_case("matmul_mv", {"a", "b"}, [](const TensorList& t) { return ember::matmul(t[0], t[1]); });
  run_case("matmul_vm", {"a", "b"}, [](const TensorList& t) { return ember::matmul(t[0], t[1]); });
}

TEST(TorchReference, Conv2d) {
  run_case("conv2d", {"x", "w", "b"}, [](const TensorList& t) {
    return ember::conv2d(t[0], t[1], t[2], {2, 2}, {1, 1}, {1, 1}, /*groups=*/2);
  });
  run_case("conv2d_plain", {"x", "w"}, [](const TensorList& t) { return ember::conv2d(t[0], t[1]); });
}

TEST(TorchReference, MaxPool2d) {
  run_case("max_pool2d_k2", {"x"}, [](const TensorList& t) { return ember::max_pool2d(t[0], {2, 2}, {2, 2}); });
  run_case("max_pool2d_k3p1", {"x"},
           [](const TensorList& t) { return ember::max_pool2d(t[0], {3, 3}, {2, 2}, {1, 1}); });
}

TEST(TorchReference, Embedding) {
  Tensor idx = fixture("embedding", "idx", DType::i64);
  run_case("embedding", {"w"}, [idx](const TensorList& t) { return ember::embedding(t[0], idx); });
  Tensor idx32 = idx.to(DType::i32);
  run_case("embedding", {"w"}, [idx32](const TensorList& t) { return ember::embedding(t[0], idx32); });
}

TEST(TorchReference, Reductions) {
  run_case("var_d1", {"x"}, [](const TensorList& t) { return t[0].var({1}, 1, /*keepdim=*/true); });
  run_case("var_all_c0", {"x"}, [](const TensorList& t) { return ember::var(t[0], {}, 0); });
  run_case("std_all", {"x"}, [](const TensorList& t) { return t[0].std(); });
  run_case("std_d0", {"x"}, [](const TensorList& t) { return ember::std(t[0], {0}); });
  run_case("norm_all", {"x"}, [](const TensorList& t) { return t[0].norm(); });
  run_case("norm_p1_d0", {"x"}, [](const TensorList& t) { return ember::norm(t[0], 1, {0}); });
  run_case("norm_p3_d1", {"x"}, [](const TensorList& t) { return t[0].norm(3, {1}, true); });
  run_case("amax_d1", {"x"}, [](const TensorList& t) { return ember::amax(t[0], {1}); });
  run_case("amax_all", {"x"}, [](const TensorList& t) { return ember::amax(t[0]); });
  run_case("amax_all", {"x"}, [](const TensorList& t) { return t[0].max(); });
}
