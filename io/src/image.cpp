// make_grid and save_image (see ember/io/image.h): torchvision.utils' algorithm written with
// ember ops (so it runs on the tensor's device); the PNG encoder is png_encode.h's.
#include "ember/io/image.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "ember/error.h"
#include "ember/factory.h"
#include "ember/functions.h"
#include "ember/grad_mode.h"
#include "file_util.h"
#include "png_encode.h"

namespace ember::io {

namespace {

constexpr const char* kMakeGrid = "[make_grid]";
constexpr const char* kSaveImage = "[save_image]";

void check_options(const char* op, const Tensor& tensor, const MakeGridOptions& o) {
  EMBER_CHECK(tensor.defined(), ValueError, op, " the image tensor is undefined");
  EMBER_CHECK(tensor.dim() >= 2 && tensor.dim() <= 4, ShapeError, op,
              " expects images [B, C, H, W], one image [C, H, W] or a gray image [H, W]; got shape ",
              tensor.sizes());
  EMBER_CHECK(tensor.dim() != 4 || tensor.size(0) > 0, ValueError, op, " the batch is empty (shape ",
              tensor.sizes(), "): there are no images to tile");
  EMBER_CHECK(o.nrow >= 1, ValueError, op, " nrow must be at least 1, got ", o.nrow);
  EMBER_CHECK(o.padding >= 0, ValueError, op, " padding must be zero or positive, got ", o.padding);
  EMBER_CHECK(!o.normalize || tensor.is_floating_point(), DTypeError, op,
              " normalize needs a floating-point tensor, got ", tensor.dtype(),
              " (convert first, e.g. x.to(DType::f32).div(255))");
  if (o.value_range) {
    const auto [low, high] = *o.value_range;
    EMBER_CHECK(std::isfinite(low) && std::isfinite(high) && low <= high, ValueError, op,
                " value_range must be two finite numbers (low, high) with low <= high, got (", low, ", ",
                high, ")");
  }
}

// torchvision's norm_ip: clamp to [low, high], then (x - low) / max(high - low, 1e-5), in place.
void norm_ip(Tensor img, double low, double high) {
  img.clamp_(low, high);
  img.sub_(low).div_(std::max(high - low, 1e-5));
}

void norm_range(const Tensor& t, const ValueRange& range) {
  if (range) norm_ip(t, range->first, range->second);
  else norm_ip(t, t.min().item<double>(), t.max().item<double>());
}

bool ends_with_png(const std::string& path) {
  if (path.size() < 4) return false;
  std::string ext = path.substr(path.size() - 4);
  for (char& c : ext) c = char(std::tolower(static_cast<unsigned char>(c)));
  return ext == ".png";
}

}  // namespace

Tensor make_grid(const Tensor& tensor, const MakeGridOptions& options) {
  check_options(kMakeGrid, tensor, options);
  NoGradGuard no_grad;
  Tensor t = tensor.detach();
  if (t.dim() == 2) t = t.unsqueeze(0);  // a single image H x W
  if (t.dim() == 3) {                    // a single image C x H x W
    if (t.size(0) == 1) t = cat({t, t, t}, 0);  // one channel: make it three
    t = t.unsqueeze(0);
  }
  if (t.size(1) == 1) t = cat({t, t, t}, 1);  // one-channel images
  if (options.normalize) {
    t = t.clone();  // never modify the input
    if (options.scale_each) {
      for (int64_t k = 0; k < t.size(0); ++k) norm_range(t.select(0, k), options.value_range);
    } else {
      norm_range(t, options.value_range);
    }
  }
  if (t.size(0) == 1) return t.squeeze(0);

  const int64_t nmaps = t.size(0);
  const int64_t xmaps = std::min(options.nrow, nmaps);
  const int64_t ymaps = (nmaps + xmaps - 1) / xmaps;
  const int64_t height = t.size(2) + options.padding, width = t.size(3) + options.padding;
  const int64_t channels = t.size(1);
  Tensor grid = full({channels, height * ymaps + options.padding, width * xmaps + options.padding},
                     options.pad_value, TensorOptions(t.dtype()).device(t.device()));
  int64_t k = 0;
  for (int64_t y = 0; y < ymaps; ++y) {
    for (int64_t x = 0; x < xmaps && k < nmaps; ++x, ++k) {
      grid.narrow(1, y * height + options.padding, height - options.padding)
          .narrow(2, x * width + options.padding, width - options.padding)
          .copy_(t.select(0, k));
    }
  }
  return grid;
}

Tensor make_grid(const TensorList& tensors, const MakeGridOptions& options) {
  EMBER_CHECK(!tensors.empty(), ValueError, kMakeGrid, " the list of images is empty");
  return make_grid(stack(tensors, 0), options);
}

void save_image(const Tensor& tensor, const std::string& fp, const SaveImageOptions& options) {
  EMBER_CHECK(ends_with_png(fp), ValueError, kSaveImage, " ", fp,
              ": ember writes PNG files only; name the file *.png");
  EMBER_CHECK(!tensor.defined() || tensor.is_floating_point(), DTypeError, kSaveImage,
              " expects floating-point images with values in [0, 1], got ", tensor.dtype(),
              " (convert first, e.g. x.to(DType::f32).div(255))");
  const MakeGridOptions grid_options = options.grid();
  check_options(kSaveImage, tensor, grid_options);
  Tensor grid = make_grid(tensor, grid_options);
  const int64_t channels = grid.size(0), height = grid.size(1), width = grid.size(2);
  EMBER_CHECK(channels >= 2 && channels <= 4, ShapeError, kSaveImage,
              " a PNG holds 3 channels (RGB), 4 (RGBA) or 2 (gray and alpha); the images have ", channels,
              " (grid shape ", grid.sizes(), ", input shape ", tensor.sizes(), ")");
  EMBER_CHECK(height >= 1 && width >= 1 && height <= detail::kPngMaxSide && width <= detail::kPngMaxSide,
              ShapeError, kSaveImage, " a PNG is 1 to 2^31 - 1 pixels a side; the grid is ", height, "x", width,
              " (shape ", grid.sizes(), ")");

  // torchvision: grid.mul(255).add_(0.5).clamp_(0, 255), in the grid's dtype and on its device,
  // then the conversion to uint8 (truncation; NaN, which clamp keeps, becomes 0), as HWC.
  std::vector<double> values;
  {
    NoGradGuard no_grad;
    Tensor scaled = grid.mul(255.0).add_(0.5).clamp_(0.0, 255.0);
    values = scaled.permute({1, 2, 0}).to_vector<double>();  // any device and layout
  }
  std::vector<unsigned char> pixels(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    const double v = values[i];
    pixels[i] = std::isnan(v) ? 0 : static_cast<unsigned char>(std::clamp(v, 0.0, 255.0));
  }
  const std::vector<unsigned char> png_bytes =
      detail::encode_png(pixels.data(), width, height, int(channels), str(kSaveImage, " ", fp));
  detail::write_file_atomic(fp, kSaveImage,
                            [&](detail::File& f) { f.write_all(png_bytes.data(), png_bytes.size()); });
}

void save_image(const TensorList& tensors, const std::string& fp, const SaveImageOptions& options) {
  EMBER_CHECK(!tensors.empty(), ValueError, kSaveImage, " the list of images is empty");
  save_image(stack(tensors, 0), fp, options);
}

}  // namespace ember::io
