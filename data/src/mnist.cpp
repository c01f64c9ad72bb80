// MNIST / Fashion-MNIST: validation of the image/label pair and per-batch conversion (see
// mnist.h for the invariants). Pixels go through a 256-entry table, so normalizing costs the
// same as not normalizing, and a batch is one pass over its bytes.
#include "ember/data/mnist.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "ember/factory.h"

namespace ember::data {

namespace {
constexpr uint32_t kImagesMagic = 2051, kLabelsMagic = 2049;
constexpr int kClasses = 10;

// <root>/<name>, or <root>/<name>.gz when only that exists.
std::string resolve(const std::string& root, const std::string& name, const char* tag,
                    const char* fetch_hint) {
  const std::filesystem::path plain = std::filesystem::path(root) / name;
  std::error_code ec;
  if (std::filesystem::exists(plain, ec)) return plain.string();
  std::filesystem::path gz = plain;
  gz += ".gz";
  if (std::filesystem::exists(gz, ec)) return gz.string();
  throw IOError(str(tag, " ", plain.string(), ": not found (nor ", gz.filename().string(),
                    "); fetch it with `", fetch_hint, "`"));
}
}  // namespace

MNIST::MNIST(const std::string& root, Split split, MNISTOptions options)
    : MNIST(root, split, options, {"[MNIST]", 0.1307, 0.3081, "bash scripts/fetch_data.sh mnist"}) {}

FashionMNIST::FashionMNIST(const std::string& root, Split split, MNISTOptions options)
    : MNIST(root, split, options,
            {"[FashionMNIST]", 0.2860, 0.3530, "bash scripts/fetch_data.sh fashion-mnist"}) {}

MNIST::MNIST(const std::string& root, Split split, MNISTOptions options, Defaults defaults)
    : tag_(defaults.tag) {
  const std::string prefix = split == Split::train ? "train" : "t10k";
  auto raw = std::make_shared<Raw>();
  raw->images_path = resolve(root, prefix + "-images-idx3-ubyte", defaults.tag, defaults.fetch_hint);
  raw->labels_path = resolve(root, prefix + "-labels-idx1-ubyte", defaults.tag, defaults.fetch_hint);

  IdxArray images = read_idx(raw->images_path, kImagesMagic, tag_);
  // The magic fixes the rank (3), and read_idx checked the payload against the dims.
  EMBER_CHECK(images.dims[1] >= 1 && images.dims[2] >= 1, IOError, tag_, " ", raw->images_path,
              ": images must have positive dims, the header says ", images.dims[1], "x",
              images.dims[2]);
  // An empty split is never what the caller wants: training would run 0 steps and report a
  // 0/0 accuracy, so it is a file error here rather than a NaN downstream.
  EMBER_CHECK(images.dims[0] >= 1, IOError, tag_, " ", raw->images_path,
              ": holds 0 images (the header's count is 0)");
  IdxArray labels = read_idx(raw->labels_path, kLabelsMagic, tag_);
  EMBER_CHECK(images.dims[0] == labels.dims[0], IOError, tag_, " ", raw->images_path, " has ",
              images.dims[0], " images but ", raw->labels_path, " has ", labels.dims[0],
              " labels");
  const auto bad = std::find_if(labels.data.begin(), labels.data.end(),
                                [](uint8_t y) { return y >= kClasses; });
  EMBER_CHECK(bad == labels.data.end(), IOError, tag_, " ", raw->labels_path, ": label ",
              int(*bad), " at index ", bad - labels.data.begin(), " is out of range 0..",
              kClasses - 1);

  count_ = images.dims[0];
  rows_ = images.dims[1];
  cols_ = images.dims[2];
  raw->images = std::move(images.data);
  raw->labels = std::move(labels.data);
  raw_ = std::move(raw);

  // A mean or stddev asks for normalization as much as normalize = true does.
  const bool normalize = options.normalize || options.mean || options.stddev;
  const double mean = normalize ? options.mean.value_or(defaults.mean) : 0.0;
  const double stddev = normalize ? options.stddev.value_or(defaults.stddev) : 1.0;
  EMBER_CHECK(stddev > 0, ValueError, tag_, " stddev must be positive, got ", stddev);
  mean_ = mean;
  stddev_ = stddev;
  for (int p = 0; p < 256; ++p) lut_[p] = float((p / 255.0 - mean) / stddev);
}

void MNIST::check_index(int64_t index) const {
  EMBER_CHECK(index >= 0 && index < count_, IndexError, tag_, " index ", index,
              " is out of range for ", count_, " images");
}

Example MNIST::get(int64_t index) const {
  check_index(index);
  const int64_t pixels = rows_ * cols_;
  Tensor image = empty({1, rows_, cols_}, DType::f32);
  float* out = image.data_ptr<float>();
  const uint8_t* in = raw_->images.data() + index * pixels;
  for (int64_t j = 0; j < pixels; ++j) out[j] = lut_[in[j]];
  return {image, scalar_tensor(int64_t(raw_->labels[size_t(index)]), DType::i64)};
}

Example MNIST::get_batch(const std::vector<int64_t>& indices) const {
  for (int64_t i : indices) check_index(i);
  const auto batch = int64_t(indices.size());
  const int64_t pixels = rows_ * cols_;
  Tensor images = empty({batch, 1, rows_, cols_}, DType::f32);
  Tensor labels = empty({batch}, DType::i64);
  float* out = images.data_ptr<float>();
  int64_t* y = labels.data_ptr<int64_t>();
  for (int64_t b = 0; b < batch; ++b) {
    const uint8_t* in = raw_->images.data() + indices[size_t(b)] * pixels;
    float* dst = out + b * pixels;
    for (int64_t j = 0; j < pixels; ++j) dst[j] = lut_[in[j]];
    y[b] = raw_->labels[size_t(indices[size_t(b)])];
  }
  return {images, labels};
}

}  // namespace ember::data
