// io::make_grid and io::save_image against torchvision's algorithm (written out in numpy by
// tests/fixtures/make_image_fixtures.py): grid values for each option, on every device and in
// f64 and f32; the PNG bytes save_image writes, read back by an independent decoder
// (support/png_read.h: zlib, no libpng) and compared with the fixture's uint8 mapping; and the
// errors, each naming what is wrong.
#include <ember/io.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <string>

#include "support/png_read.h"
#include "support/test_support.h"

namespace ember {
namespace {

namespace fs = std::filesystem;
using test::all_close;
using test::load_fixture;
using test::message_of;

constexpr const char* kFixtures = "image_reference.txt";

struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "ember-image-XXXXXX").string();
    EXPECT_NE(::mkdtemp(tmpl.data()), nullptr);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

::testing::AssertionResult contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << part << "\" is not in \"" << text << "\"";
}

struct GridCase {
  const char* name;
  io::MakeGridOptions options;
};

// The fixture script's cases, with the same options.
const GridCase kGridCases[] = {
    {"grid.nrow3_b5", {.nrow = 3}},
    {"grid.pad0_c2", {.nrow = 2, .padding = 0}},
    {"grid.pad3_value", {.padding = 3, .pad_value = 0.5}},
    {"grid.nrow1_c4", {.nrow = 1, .padding = 1, .pad_value = 1.0}},
    {"grid.gray_batch", {.nrow = 2}},
    {"grid.gray_chw", {}},
    {"grid.gray_hw", {}},
    {"grid.batch_of_one", {.padding = 4}},
    {"grid.norm", {.nrow = 3, .normalize = true}},
    {"grid.norm_range", {.normalize = true, .value_range = {-1, 1}}},
    {"grid.scale_each", {.normalize = true, .scale_each = true}},
    {"grid.scale_each_range", {.normalize = true, .value_range = {-0.5, 2.0}, .scale_each = true}},
    {"grid.norm_constant", {.normalize = true}},
    {"grid.norm_single", {.normalize = true}},
};

// save_image needs the build's PNG encoder (libpng: optional, as on the GPU machine).
#define EMBER_SKIP_IF_NO_PNG() \
  if (!io::png_output_available()) GTEST_SKIP() << "this build has no PNG output (libpng-dev not found)"

// Without libpng, save_image says so (and make_grid still works).
TEST(SaveImage, WithoutLibpngSaysWhatToInstall) {
  if (io::png_output_available()) GTEST_SKIP() << "this build has libpng";
  TempDir dir;
  EXPECT_TRUE(contains(message_of<NotImplementedError>([&] { io::save_image(rand({3, 4, 4}), dir.file("x.png")); }),
                       "install libpng-dev"));
}

class ImageTest : public ::testing::TestWithParam<Device> {};

TEST_P(ImageTest, MakeGridMatchesTorchvisionsAlgorithm) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  for (const GridCase& c : kGridCases) {
    SCOPED_TRACE(c.name);
    const test::Fixture x = load_fixture(kFixtures, std::string(c.name) + ".x");
    const test::Fixture y = load_fixture(kFixtures, std::string(c.name) + ".y");
    for (DType dt : {DType::f64, DType::f32}) {
      SCOPED_TRACE(dtype_name(dt));
      const Tensor input = x.tensor(dt).to(dev);
      const Tensor before = input.clone();
      const Tensor grid = io::make_grid(input, c.options);
      EXPECT_EQ(grid.dtype(), dt);
      EXPECT_EQ(grid.device(), dev);
      const double tol = dt == DType::f64 ? 1e-12 : 1e-6;
      EXPECT_TRUE(all_close(grid, y.shape, y.values, tol, tol));
      EXPECT_TRUE(all_close(input, before, 0, 0)) << "make_grid modified its input";
    }
  }
}

TEST_P(ImageTest, SaveImageWritesTorchvisionsBytes) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  EMBER_SKIP_IF_NO_PNG();
  TempDir dir;
  struct SaveCase {
    const char* name;
    io::SaveImageOptions options;
    int color_type;  // PNG: 2 RGB, 6 RGBA, 4 gray + alpha
  };
  const SaveCase cases[] = {
      {"save.edges", {.nrow = 2, .padding = 1, .pad_value = 0.5}, 2},
      {"save.rgb", {.nrow = 3}, 2},
      {"save.rgba_norm", {.normalize = true, .value_range = {-2, 2}}, 6},
      {"save.gray_alpha", {.padding = 0}, 4},
  };
  for (const SaveCase& c : cases) {
    SCOPED_TRACE(c.name);
    const Tensor x = load_fixture(kFixtures, std::string(c.name) + ".x").tensor(DType::f32).to(dev);
    const test::Fixture u8 = load_fixture(kFixtures, std::string(c.name) + ".u8");
    const std::string path = dir.file(std::string(c.name) + ".png");
    io::save_image(x, path, c.options);
    const test::Png png = test::read_png(path);
    ASSERT_EQ(png.error, "");
    EXPECT_EQ(png.color_type, c.color_type);
    EXPECT_EQ(png.bit_depth, 8);
    ASSERT_EQ(u8.shape.size(), 3u);
    ASSERT_EQ(int64_t(png.height), u8.shape[0]);
    ASSERT_EQ(int64_t(png.width), u8.shape[1]);
    ASSERT_EQ(int64_t(png.channels), u8.shape[2]);
    ASSERT_EQ(png.pixels.size(), u8.values.size());
    size_t wrong = 0;
    for (size_t i = 0; i < png.pixels.size(); ++i) {
      if (double(png.pixels[i]) != u8.values[i] && wrong++ < 5)
        ADD_FAILURE() << "byte " << i << ": " << int(png.pixels[i]) << ", expected " << u8.values[i];
    }
    EXPECT_EQ(wrong, 0u);
  }
  // Only the files asked for: no temporary file is left behind.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()), 4);
}

INSTANTIATE_TEST_SUITE_P(Devices, ImageTest, ::testing::ValuesIn(test::test_devices()), test::device_label);

// A VAE's samples: 64 gray 28x28 images become an 8x8 RGB grid of 242x242 pixels.
TEST(SaveImage, SixtyFourGrayImagesMakeAn8x8RgbGrid) {
  EMBER_SKIP_IF_NO_PNG();
  TempDir dir;
  const Tensor x = rand({64, 1, 28, 28});
  const std::string path = dir.file("samples.png");
  io::save_image(x, path);
  const test::Png png = test::read_png(path);
  ASSERT_EQ(png.error, "");
  EXPECT_EQ(png.width, 242u);
  EXPECT_EQ(png.height, 242u);
  EXPECT_EQ(png.color_type, 2);
  // Image 9 (row 1, column 1) starts at pixel (2 + 30, 2 + 30); its (3, 5) is x[9, 0, 3, 5].
  const double v = x.index({9, 0, 3, 5}).item<double>();
  for (int ch = 0; ch < 3; ++ch) EXPECT_EQ(png.at(32 + 3, 32 + 5, ch), uint8_t(v * 255 + 0.5));
  EXPECT_EQ(png.at(0, 0, 0), 0);  // padding
  // Saving again replaces the file.
  io::save_image(x.index({indexing::Slice(0, 4)}), path, {.nrow = 2});
  EXPECT_EQ(test::read_png(path).width, 62u);
}

// Every floating dtype: values whose bytes are exact in each (0, 0.5, 1 -> 0, 128, 255); NaN
// becomes 0 and the infinities clamp.
TEST(SaveImage, AnyFloatingDtypeAndNonFiniteValues) {
  EMBER_SKIP_IF_NO_PNG();
  TempDir dir;
  const double inf = std::numeric_limits<double>::infinity();
  const Tensor x = tensor(std::vector<double>{0.0, 0.5, 1.0, std::nan(""), inf, -inf}, Shape{1, 2, 3});
  for (DType dt : {DType::f64, DType::f32, DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    const std::string path = dir.file(std::string(dtype_name(dt)) + ".png");
    io::save_image(x.to(dt), path);
    const test::Png png = test::read_png(path);
    ASSERT_EQ(png.error, "");
    ASSERT_EQ(png.width, 3u);
    ASSERT_EQ(png.height, 2u);
    const uint8_t expected[6] = {0, 128, 255, 0, 255, 0};
    for (uint32_t i = 0; i < 6; ++i)
      for (int ch = 0; ch < 3; ++ch) EXPECT_EQ(png.at(i / 3, i % 3, ch), expected[i]) << "pixel " << i;
  }
}

TEST(MakeGrid, ListFormStacksAndNoGraphIsRecorded) {
  const Tensor a = rand({1, 4, 5}).requires_grad_(), b = rand({1, 4, 5});
  const Tensor grid = io::make_grid(TensorList{a, b, a}, {.nrow = 2, .normalize = true});
  EXPECT_FALSE(grid.requires_grad());
  EXPECT_TRUE(all_close(grid, io::make_grid(stack({a, b, a}).detach(), {.nrow = 2, .normalize = true}), 0, 0));
  EXPECT_EQ(grid.sizes(), (Shape{3, 14, 16}));
}

// Without normalize, integer images tile in their own dtype (torchvision's new_full and copy_).
TEST(MakeGrid, IntegerImagesKeepTheirDtype) {
  const Tensor x = arange(2 * 3 * 2 * 2).to(DType::u8).reshape({2, 3, 2, 2});
  const Tensor grid = io::make_grid(x, {.padding = 1, .pad_value = 7});
  EXPECT_EQ(grid.dtype(), DType::u8);
  EXPECT_EQ(grid.sizes(), (Shape{3, 4, 7}));
  EXPECT_EQ(grid.index({0, 0, 0}).item<int64_t>(), 7);
  EXPECT_EQ(grid.index({1, 2, 5}).item<int64_t>(), x.index({1, 1, 1, 1}).item<int64_t>());
}

TEST(MakeGrid, BadArgumentsThrowClearErrors) {
  const Tensor x = rand({2, 3, 4, 4});
  EXPECT_TRUE(contains(message_of<ShapeError>([&] { io::make_grid(rand({5})); }), "[make_grid]"));
  EXPECT_TRUE(contains(message_of<ShapeError>([&] { io::make_grid(rand({1, 2, 3, 4, 5})); }), "[1, 2, 3, 4, 5]"));
  EXPECT_TRUE(contains(message_of<ValueError>([&] { io::make_grid(x, {.nrow = 0}); }), "nrow must be at least 1, got 0"));
  EXPECT_TRUE(contains(message_of<ValueError>([&] { io::make_grid(x, {.padding = -1}); }), "padding"));
  EXPECT_TRUE(contains(message_of<ValueError>([&] { io::make_grid(rand({0, 3, 4, 4})); }), "batch is empty"));
  EXPECT_TRUE(contains(message_of<DTypeError>([&] { io::make_grid(x.to(DType::u8), {.normalize = true}); }),
                       "normalize needs a floating-point tensor"));
  EXPECT_TRUE(contains(message_of<ValueError>([&] { io::make_grid(x, {.normalize = true, .value_range = {1, -1}}); }),
                       "low <= high"));
  EXPECT_TRUE(contains(message_of<ValueError>([&] { io::make_grid(Tensor()); }), "undefined"));
  EXPECT_TRUE(contains(message_of<ValueError>([&] { io::make_grid(TensorList{}); }), "empty"));
}

TEST(SaveImage, BadArgumentsAndUnwritablePathsThrowClearErrors) {
  EMBER_SKIP_IF_NO_PNG();
  TempDir dir;
  const Tensor x = rand({2, 3, 4, 4});
  // The folder does not exist: the message names the path and the system's reason.
  const std::string missing = dir.file("no/such/folder/x.png");
  const std::string m = message_of<IOError>([&] { io::save_image(x, missing); });
  EXPECT_TRUE(contains(m, "[save_image]"));
  EXPECT_TRUE(contains(m, missing));
  EXPECT_TRUE(contains(m, "No such file or directory"));
  // A folder in the file's place.
  fs::create_directory(dir.path / "taken.png");
  EXPECT_TRUE(contains(message_of<IOError>([&] { io::save_image(x, dir.file("taken.png")); }), "taken.png"));
  EXPECT_TRUE(fs::is_directory(dir.path / "taken.png"));
  EXPECT_TRUE(contains(message_of<ValueError>([&] { io::save_image(x, dir.file("x.jpg")); }), "PNG files only"));
  EXPECT_TRUE(contains(message_of<DTypeError>([&] { io::save_image(x.to(DType::u8), dir.file("x.png")); }),
                       "floating-point"));
  EXPECT_TRUE(contains(message_of<ShapeError>([&] { io::save_image(rand({2, 5, 4, 4}), dir.file("x.png")); }),
                       "the images have 5"));
  EXPECT_TRUE(contains(message_of<ShapeError>([&] { io::save_image(rand({2, 3, 0, 4}), dir.file("x.png"), {.padding = 0}); }),
                       "1 to 2^31 - 1 pixels"));
  EXPECT_TRUE(contains(message_of<ValueError>([&] { io::save_image(x, dir.file("x.png"), {.nrow = 0}); }),
                       "[save_image] nrow"));
  // Nothing was written by the failed calls (the taken.png folder is the only entry).
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()), 1);
}

}  // namespace
}  // namespace ember
