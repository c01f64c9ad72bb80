// IDX reader and MNIST: small files written here with known contents read back exactly;
// every kind of corruption is an IOError naming the file; the real MNIST (when fetched into
// data/mnist) has its known sizes and facts.
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include <ember/data.h>

#include "support/test_support.h"

namespace fs = std::filesystem;
using namespace ember;
using ember::test::message_of;

namespace {

std::vector<uint8_t> be32(uint32_t v) {
  return {uint8_t(v >> 24), uint8_t(v >> 16), uint8_t(v >> 8), uint8_t(v)};
}

// Header (magic, dims) followed by payload, as raw bytes.
std::vector<uint8_t> idx_bytes(uint32_t magic, const std::vector<uint32_t>& dims,
                               const std::vector<uint8_t>& payload) {
  std::vector<uint8_t> b = be32(magic);
  for (uint32_t d : dims) {
    auto e = be32(d);
    b.insert(b.end(), e.begin(), e.end());
  }
  b.insert(b.end(), payload.begin(), payload.end());
  return b;
}

void write_file(const fs::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  ASSERT_TRUE(f.good()) << path;
}

void write_gzip(const fs::path& path, const std::vector<uint8_t>& bytes) {
  gzFile gz = gzopen(path.c_str(), "wb");
  ASSERT_NE(gz, nullptr) << path;
  ASSERT_EQ(gzwrite(gz, bytes.data(), unsigned(bytes.size())), int(bytes.size()));
  ASSERT_EQ(gzclose(gz), Z_OK);
}

// A fresh temporary folder per test, removed afterwards.
class IdxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("ember_test_data_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A tiny MNIST-shaped pair: n images of rows x cols with pixel (i, j) = (7 i + j) % 256,
  // labels i % 10.
  std::vector<uint8_t> pixels(uint32_t n, uint32_t rows, uint32_t cols) const {
    std::vector<uint8_t> p(size_t(n) * rows * cols);
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < size_t(rows) * cols; ++j) p[i * rows * cols + j] = uint8_t((7 * i + j) % 256);
    return p;
  }
  std::vector<uint8_t> labels(uint32_t n) const {
    std::vector<uint8_t> l(n);
    for (uint32_t i = 0; i < n; ++i) l[i] = uint8_t(i % 10);
    return l;
  }
  void write_pair(const std::string& prefix, uint32_t n, uint32_t rows, uint32_t cols) {
    write_file(dir_ / (prefix + "-images-idx3-ubyte"), idx_bytes(2051, {n, rows, cols}, pixels(n, rows, cols)));
    write_file(dir_ / (prefix + "-labels-idx1-ubyte"), idx_bytes(2049, {n}, labels(n)));
  }
  fs::path images() const { return dir_ / "train-images-idx3-ubyte"; }
  fs::path labels_file() const { return dir_ / "train-labels-idx1-ubyte"; }

  // The IOError message of loading the train split.
  std::string load_error() {
    return message_of<IOError>([&] { data::MNIST m(dir_.string(), data::Split::train); });
  }

  fs::path dir_;
};

TEST_F(IdxTest, ReadIdxGivesExactDimsAndBytes) {
  const std::vector<uint8_t> payload = {0, 1, 2, 250, 251, 255};
  write_file(dir_ / "a.idx", idx_bytes(0x00000803, {1, 2, 3}, payload));
  data::IdxArray a = data::read_idx((dir_ / "a.idx").string(), 2051);
  EXPECT_EQ(a.dims, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(a.data, payload);
  // Any rank of u8 when no magic is required.
  write_file(dir_ / "b.idx", idx_bytes(0x00000802, {3, 2}, payload));
  data::IdxArray b = data::read_idx((dir_ / "b.idx").string());
  EXPECT_EQ(b.dims, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(b.data, payload);
}

TEST_F(IdxTest, MnistValuesAreExact) {
  write_pair("train", 5, 3, 4);
  write_pair("t10k", 2, 3, 4);
  data::MNIST raw(dir_.string(), data::Split::train, {.normalize = false});
  ASSERT_EQ(raw.size(), 5);
  EXPECT_EQ(raw.rows(), 3);
  EXPECT_EQ(raw.cols(), 4);
  const auto px = pixels(5, 3, 4);
  for (int64_t i = 0; i < 5; ++i) {
    data::Example e = raw.get(i);
    ASSERT_EQ(e.data.sizes(), (Shape{1, 3, 4}));
    ASSERT_EQ(e.data.dtype(), DType::f32);
    ASSERT_EQ(e.target.dim(), 0);
    ASSERT_EQ(e.target.dtype(), DType::i64);
    EXPECT_EQ(e.target.item<int64_t>(), i % 10);
    std::vector<float> v = e.data.to_vector<float>();
    for (size_t j = 0; j < 12; ++j) EXPECT_EQ(v[j], float(px[size_t(i) * 12 + j] / 255.0)) << i << "," << j;
  }
  data::MNIST test(dir_.string(), data::Split::test);
  EXPECT_EQ(test.size(), 2);

  // The default is PyTorch's (torchvision's MNIST with ToTensor): x/255, not normalized.
  data::MNIST plain(dir_.string());
  EXPECT_EQ(plain.get(3).data.to_vector<float>(), raw.get(3).data.to_vector<float>());
  // normalize = true: (x/255 - 0.1307) / 0.3081; a mean or stddev alone normalizes too.
  data::MNIST norm(dir_.string(), data::Split::train, {.normalize = true});
  data::MNIST custom(dir_.string(), data::Split::train, {.mean = 0.5, .stddev = 0.25});
  data::MNIST mean_only(dir_.string(), data::Split::train, {.mean = 0.5});
  std::vector<float> n3 = norm.get(3).data.to_vector<float>();
  std::vector<float> c3 = custom.get(3).data.to_vector<float>();
  std::vector<float> m3 = mean_only.get(3).data.to_vector<float>();
  for (size_t j = 0; j < 12; ++j) {
    const double x = px[3 * 12 + j] / 255.0;
    EXPECT_FLOAT_EQ(n3[j], float((x - 0.1307) / 0.3081));
    EXPECT_FLOAT_EQ(c3[j], float((x - 0.5) / 0.25));
    EXPECT_FLOAT_EQ(m3[j], float((x - 0.5) / 0.3081));
  }
}

TEST_F(IdxTest, GetBatchEqualsStackedGets) {
  write_pair("train", 9, 2, 2);
  data::MNIST m(dir_.string());
  const std::vector<int64_t> idx = {8, 0, 3, 3};
  data::Example batch = m.get_batch(idx);
  ASSERT_EQ(batch.data.sizes(), (Shape{4, 1, 2, 2}));
  ASSERT_EQ(batch.target.sizes(), (Shape{4}));
  ASSERT_EQ(batch.target.dtype(), DType::i64);
  // The generic Dataset::get_batch stacks get(i): both must agree exactly.
  data::Example stacked = m.data::Dataset::get_batch(idx);
  EXPECT_EQ(batch.data.to_vector<float>(), stacked.data.to_vector<float>());
  EXPECT_EQ(batch.target.to_vector<int64_t>(), (std::vector<int64_t>{8, 0, 3, 3}));
  EXPECT_EQ(stacked.target.to_vector<int64_t>(), (std::vector<int64_t>{8, 0, 3, 3}));
  EXPECT_NE(message_of<IndexError>([&] { m.get_batch({0, 9}); }).find("index 9 is out of range"),
            std::string::npos);
  EXPECT_NE(message_of<IndexError>([&] { m.get(-1); }).find("[MNIST] index -1"), std::string::npos);
}

TEST_F(IdxTest, GzipFormsAreRead) {
  const uint32_t n = 4, r = 2, c = 3;
  write_gzip(dir_ / "train-images-idx3-ubyte.gz", idx_bytes(2051, {n, r, c}, pixels(n, r, c)));
  write_gzip(dir_ / "train-labels-idx1-ubyte.gz", idx_bytes(2049, {n}, labels(n)));
  data::FashionMNIST m(dir_.string(), data::Split::train, {.normalize = false});
  EXPECT_EQ(m.size(), 4);
  EXPECT_EQ(m.raw_images(), pixels(n, r, c));
  EXPECT_EQ(m.raw_labels(), labels(n));
  EXPECT_EQ(m.images_path(), (dir_ / "train-images-idx3-ubyte.gz").string());
  // Fashion-MNIST's own normalization defaults.
  data::FashionMNIST norm(dir_.string(), data::Split::train, {.normalize = true});
  EXPECT_FLOAT_EQ(norm.get(0).data.to_vector<float>()[1], float((1 / 255.0 - 0.2860) / 0.3530));

  // A truncated gzip stream, and one longer than its header says.
  auto full = idx_bytes(2051, {n, r, c}, pixels(n, r, c));
  write_gzip(dir_ / "train-images-idx3-ubyte.gz", std::vector<uint8_t>(full.begin(), full.end() - 5));
  std::string msg = load_error();
  EXPECT_NE(msg.find("train-images-idx3-ubyte.gz: truncated: header says 4 images of 2x3 (40 bytes) "
                     "but the file decompresses to 35 bytes"),
            std::string::npos)
      << msg;
  full.push_back(0);
  write_gzip(dir_ / "train-images-idx3-ubyte.gz", full);
  msg = load_error();
  EXPECT_NE(msg.find("size mismatch"), std::string::npos) << msg;
  // Huge dims cannot make a small gzip file allocate: the deflate bound refuses first.
  write_gzip(dir_ / "train-images-idx3-ubyte.gz", idx_bytes(2051, {60000, 4096, 4096}, {}));
  msg = load_error();
  EXPECT_NE(msg.find("cannot decompress to more than"), std::string::npos) << msg;
  // Garbage named .gz.
  write_file(dir_ / "train-images-idx3-ubyte.gz", {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3, 1, 2, 3, 4});
  msg = load_error();
  EXPECT_NE(msg.find("train-images-idx3-ubyte.gz: corrupt gzip data"), std::string::npos) << msg;
  // A gzip file cut short.
  write_gzip(dir_ / "train-images-idx3-ubyte.gz", idx_bytes(2051, {n, r, c}, pixels(n, r, c)));
  const auto size = fs::file_size(dir_ / "train-images-idx3-ubyte.gz");
  fs::resize_file(dir_ / "train-images-idx3-ubyte.gz", size - 12);
  msg = load_error();
  EXPECT_NE(msg.find("train-images-idx3-ubyte.gz: corrupt gzip data"), std::string::npos) << msg;
}

TEST_F(IdxTest, EveryCorruptionIsAnIOErrorNamingTheFile) {
  const std::string img = images().string(), lab = labels_file().string();
  auto expect_error = [&](const std::string& file, const std::string& what) {
    const std::string msg = load_error();
    EXPECT_NE(msg.find("[MNIST] " + file + ": "), std::string::npos) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << "expected '" << what << "' in: " << msg;
  };

  // Missing files.
  expect_error(img, "not found");
  write_pair("train", 6, 28, 28);
  fs::remove(labels_file());
  expect_error(lab, "not found");

  // Empty file.
  write_pair("train", 6, 28, 28);
  write_file(images(), {});
  expect_error(img, "empty file");

  // Wrong magic: swapped files, random bytes, a plain gzip stream.
  write_pair("train", 6, 28, 28);
  write_file(images(), idx_bytes(2049, {6}, labels(6)));
  expect_error(img, "bad magic number 2049, expected 2051");
  write_pair("train", 6, 28, 28);
  write_file(labels_file(), idx_bytes(2051, {6, 28, 28}, pixels(6, 28, 28)));
  expect_error(lab, "bad magic number 2051, expected 2049");
  write_file(labels_file(), idx_bytes(0x12345678, {6}, labels(6)));
  expect_error(lab, "bad magic number 305419896");

  // Truncated: the exact message the brief asks for (header vs file size).
  write_pair("train", 6, 28, 28);
  auto bytes = idx_bytes(2051, {60000, 28, 28}, std::vector<uint8_t>(1000 - 16, 0));
  write_file(images(), bytes);
  expect_error(img, "truncated: header says 60000 images of 28x28 (47040016 bytes) but the file "
                    "has 1000 bytes");
  // Truncated inside the header.
  write_file(images(), {0, 0, 8, 3, 0, 0});
  expect_error(img, "truncated");
  // Longer than the header says.
  auto longer = idx_bytes(2051, {6, 28, 28}, pixels(6, 28, 28));
  longer.push_back(1);
  write_file(images(), longer);
  expect_error(img, "size mismatch: header says 6 images of 28x28 (4720 bytes) but the file has "
                    "4721 bytes");

  // Huge dims: refused from the file size, without allocating (a 16-byte file).
  write_file(images(), idx_bytes(2051, {0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF}, {}));
  expect_error(img, "truncated: header says 4294967295 images of 4294967295x4294967295 (more than "
                    "2^64 bytes) but the file has 16 bytes");
  write_file(images(), idx_bytes(2051, {100000, 65535, 65535}, {}));
  expect_error(img, "but the file has 16 bytes");

  // Zero-sized images.
  write_file(images(), idx_bytes(2051, {6, 0, 28}, {}));
  expect_error(img, "images must have positive dims");

  // Count mismatch names both files.
  write_pair("train", 6, 28, 28);
  write_file(labels_file(), idx_bytes(2049, {5}, labels(5)));
  {
    const std::string msg = load_error();
    EXPECT_NE(msg.find("[MNIST] " + img + " has 6 images but " + lab + " has 5 labels"),
              std::string::npos)
        << msg;
  }

  // Label out of range.
  auto bad_labels = labels(6);
  bad_labels[4] = 10;
  write_file(labels_file(), idx_bytes(2049, {6}, bad_labels));
  expect_error(lab, "label 10 at index 4 is out of range 0..9");

  // And a good pair loads again after all that.
  write_pair("train", 6, 28, 28);
  EXPECT_EQ(data::MNIST(dir_.string()).size(), 6);
}

// A real data set (data/<name>) when scripts/fetch_data.sh has fetched it, else empty.
fs::path fetched(const std::string& name, const std::string& probe) {
  for (fs::path p = fs::path(EMBER_TEST_DATA_DIR); !p.empty(); p = p.parent_path()) {
    if (fs::exists(p / "data" / name / probe)) return p / "data" / name;
    if (p == p.parent_path()) break;
  }
  return {};
}

TEST(MnistReal, SizesLabelsAndKnownFacts) {
  const fs::path dir = fetched("mnist", "train-labels-idx1-ubyte");
  if (dir.empty()) GTEST_SKIP() << "MNIST not fetched (bash scripts/fetch_data.sh)";
  data::MNIST train(dir.string(), data::Split::train);
  data::MNIST test(dir.string(), data::Split::test);
  ASSERT_EQ(train.size(), 60000);
  ASSERT_EQ(test.size(), 10000);
  EXPECT_EQ(train.rows(), 28);
  EXPECT_EQ(train.cols(), 28);
  EXPECT_EQ(train.get(0).target.item<int64_t>(), 5);  // the famous first "5"
  EXPECT_EQ(train.get(1).target.item<int64_t>(), 0);
  EXPECT_EQ(test.get(0).target.item<int64_t>(), 7);
  // Class counts of the standard training set.
  std::array<int64_t, 10> hist{};
  for (uint8_t y : train.raw_labels()) ++hist[y];
  EXPECT_EQ(hist, (std::array<int64_t, 10>{5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949}));
  EXPECT_EQ(std::accumulate(hist.begin(), hist.end(), int64_t(0)), 60000);
  std::array<int64_t, 10> test_hist{};
  for (uint8_t y : test.raw_labels()) ++test_hist[y];
  EXPECT_EQ(test_hist, (std::array<int64_t, 10>{980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009}));
  // Normalized over the whole training set, the pixels have mean ~0 and std ~1.
  double sum = 0, sq = 0;
  for (uint8_t p : train.raw_images()) {
    const double v = (p / 255.0 - 0.1307) / 0.3081;
    sum += v;
    sq += v * v;
  }
  const double n = double(train.raw_images().size());
  EXPECT_NEAR(sum / n, 0.0, 1e-3);
  EXPECT_NEAR(std::sqrt(sq / n - (sum / n) * (sum / n)), 1.0, 1e-3);
  // A batch through get_batch agrees with get().
  data::Example b = train.get_batch({0, 59999});
  EXPECT_EQ(b.data.sizes(), (Shape{2, 1, 28, 28}));
  EXPECT_EQ(b.data.select(0, 1).to_vector<float>(), train.get(59999).data.to_vector<float>());
}

TEST(FashionMnistReal, SizesLabelsAndKnownFacts) {
  const fs::path dir = fetched("fashion-mnist", "train-labels-idx1-ubyte.gz");
  if (dir.empty()) GTEST_SKIP() << "Fashion-MNIST not fetched (bash scripts/fetch_data.sh fashion-mnist)";
  data::FashionMNIST train(dir.string(), data::Split::train);
  data::FashionMNIST test(dir.string(), data::Split::test);
  ASSERT_EQ(train.size(), 60000);
  ASSERT_EQ(test.size(), 10000);
  EXPECT_EQ(train.rows(), 28);
  // Known first labels: ankle boot (9), T-shirt (0), T-shirt, dress (3); the test set starts
  // with an ankle boot and a pullover (2).
  EXPECT_EQ(train.get_batch({0, 1, 2, 3}).target.to_vector<int64_t>(), (std::vector<int64_t>{9, 0, 0, 3}));
  EXPECT_EQ(test.get_batch({0, 1}).target.to_vector<int64_t>(), (std::vector<int64_t>{9, 2}));
  // Balanced classes: 6000 per class in train, 1000 in test.
  std::array<int64_t, 10> hist{}, test_hist{};
  for (uint8_t y : train.raw_labels()) ++hist[y];
  for (uint8_t y : test.raw_labels()) ++test_hist[y];
  for (int c = 0; c < 10; ++c) {
    EXPECT_EQ(hist[size_t(c)], 6000) << c;
    EXPECT_EQ(test_hist[size_t(c)], 1000) << c;
  }
  // Its normalization defaults are its own statistics (mean 0.2860, std 0.3530).
  double sum = 0, sq = 0;
  for (uint8_t p : train.raw_images()) {
    sum += p / 255.0;
    sq += (p / 255.0) * (p / 255.0);
  }
  const double n = double(train.raw_images().size()), mean = sum / n;
  EXPECT_NEAR(mean, 0.2860, 1e-4);
  EXPECT_NEAR(std::sqrt(sq / n - mean * mean), 0.3530, 1e-4);
}

}  // namespace
