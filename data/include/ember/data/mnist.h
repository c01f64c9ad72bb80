// MNIST and Fashion-MNIST from their IDX files, as scripts/fetch_data.sh lays them out:
//   <root>/train-images-idx3-ubyte  <root>/train-labels-idx1-ubyte
//   <root>/t10k-images-idx3-ubyte   <root>/t10k-labels-idx1-ubyte
// each also accepted gzip-compressed with a ".gz" suffix (the plain file wins when both exist).
//
// Invariants:
// - Files are validated before anything is kept: magic numbers (2051 images, 2049 labels),
//   positive image dims, file size exactly as the header implies, image and label counts
//   equal, labels in 0..9. Any failure throws ember::IOError naming the file and the fault:
//   "[MNIST] data/mnist/train-images-idx3-ubyte: truncated: header says ...".
// - Memory is never allocated beyond what the file size implies (a corrupt header cannot
//   make the reader allocate gigabytes).
// - The raw u8 pixels stay in memory (shared by copies of the dataset); conversion to f32
//   happens per batch, so get_batch is one pass over B*H*W bytes through a lookup table.
// - Images are f32 [1, H, W], x/255 in [0, 1] by default (what torchvision's ToTensor gives,
//   so a port gets PyTorch's numbers); {.normalize = true} gives (x/255 - mean) / stddev with
//   the data set's standard statistics. Labels are i64 scalars. get_batch gives [B, 1, H, W]
//   f32 and [B] i64.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ember/data/dataset.h"

namespace ember::data {

enum class Split { train, test };

// An unsigned-byte IDX array (type code 0x08), e.g. MNIST's images [N, 28, 28] or labels [N].
struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;  // row-major, product(dims) bytes
};
// Reads `path` (gzip when it ends in ".gz"), requiring `expected_magic` (2051 or 2049 for
// MNIST; 0 accepts any u8 array) and an exact file size. `tag` begins error messages.
IdxArray read_idx(const std::string& path, uint32_t expected_magic = 0,
                  const std::string& tag = "[idx]");

struct MNISTOptions {
  // Normalize to (x/255 - mean) / stddev (torchvision's Normalize after ToTensor); when false
  // (the default, as torchvision's MNIST without a transform), images are x/255 in [0, 1].
  bool normalize = false;
  // Either one given normalizes too. Defaults: MNIST's 0.1307 / 0.3081, Fashion-MNIST's
  // 0.2860 / 0.3530.
  std::optional<double> mean = std::nullopt, stddev = std::nullopt;
};

class MNIST : public Dataset {
 public:
  MNIST(const std::string& root, Split split = Split::train, MNISTOptions options = {});

  int64_t size() const override { return count_; }
  Example get(int64_t index) const override;
  Example get_batch(const std::vector<int64_t>& indices) const override;

  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  // The raw data: count * rows * cols pixels and count labels.
  const std::vector<uint8_t>& raw_images() const { return raw_->images; }
  const std::vector<uint8_t>& raw_labels() const { return raw_->labels; }
  // The normalization applied, pixel -> (pixel/255 - mean) / stddev (0 and 1 when none).
  double mean() const { return mean_; }
  double stddev() const { return stddev_; }
  // The image and label files actually read.
  const std::string& images_path() const { return raw_->images_path; }
  const std::string& labels_path() const { return raw_->labels_path; }

 protected:
  struct Defaults {
    const char* tag;  // "[MNIST]"
    double mean, stddev;
    const char* fetch_hint;  // the command that fetches the files
  };
  MNIST(const std::string& root, Split split, MNISTOptions options, Defaults defaults);

 private:
  struct Raw {
    std::vector<uint8_t> images, labels;
    std::string images_path, labels_path;
  };
  void check_index(int64_t index) const;

  std::shared_ptr<const Raw> raw_;
  int64_t count_ = 0, rows_ = 0, cols_ = 0;
  double mean_ = 0, stddev_ = 1;
  std::string tag_;
  float lut_[256];  // pixel byte -> normalized value
};

// Fashion-MNIST: the same files and format (scripts/fetch_data.sh fashion-mnist puts them in
// data/fashion-mnist/), with its own normalization defaults.
class FashionMNIST : public MNIST {
 public:
  FashionMNIST(const std::string& root, Split split = Split::train, MNISTOptions options = {});
};

}  // namespace ember::data
