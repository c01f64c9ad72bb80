// Image output, as torchvision.utils: make_grid tiles a batch of images into one image, and
// save_image writes one (or a grid of many) as an 8-bit PNG (libpng).
//
//   Tensor samples = decoder(z);                                   // [64, 1, 28, 28] in [0, 1]
//   io::save_image(samples, "samples.png");                        // 8x8 grid, 242x242 RGB
//   io::save_image(x, "x.png", {.nrow = 4, .padding = 0, .normalize = true, .value_range = {-1, 1}});
//   Tensor grid = io::make_grid(x, {.nrow = 16, .pad_value = 1.0});  // [3, H', W'], x's device
//
// Semantics are torchvision's (0.15+), argument for argument, in its order:
// - Input: [B, C, H, W], one image [C, H, W], or [H, W] (one gray image). One-channel images
//   become three (the channel repeated), so a grid of gray images is RGB, as in torchvision.
// - normalize: each value v becomes (clamp(v, low, high) - low) / max(high - low, 1e-5), with
//   (low, high) = value_range, or the min and max of the whole batch (of each image when
//   scale_each). Needs a floating-point tensor.
// - The grid: min(nrow, B) images a row, ceil(B / that) rows, `padding` pixels of pad_value
//   around and between them: [C, (H + padding) * rows + padding, (W + padding) * cols + padding].
//   A batch of one image is returned as that image, without padding (as torchvision does).
// - save_image(tensor, fp, make_grid's options): the grid's values become bytes as
//   torchvision's `grid.mul(255).add_(0.5).clamp_(0, 255).to(torch.uint8)`, computed in the
//   grid's dtype (values in [0, 1] round to the nearest of 0..255; NaN becomes 0), and a grid of
//   3 channels is written as RGB, 4 as RGBA, 2 as gray + alpha (PIL's modes for those arrays).
//
// Where ember is stricter than torchvision (which fails later, or writes something useless):
// nrow < 1, padding < 0, an empty batch, value_range with low > high or not finite, normalize
// of an integer tensor, save_image of an integer tensor, a file name not ending in .png (ember
// writes PNG only; PIL would pick the format from the extension), a grid PNG cannot hold.
// Errors are ember's: ShapeError (rank, channels), DTypeError, ValueError (options), IOError
// (the file: the message names the path and the system's reason).
//
// Both run without recording a graph (torchvision's @torch.no_grad) and never modify their
// input. The file is written atomically: a temporary file in the same folder, fsynced, then
// renamed over `fp`, so a reader never sees half a PNG.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "ember/tensor.h"

namespace ember::io {

// torchvision's value_range=(low, high) or None, spelled `.value_range = {-1, 1}` (a plain
// std::optional<std::pair> would need `{{-1, 1}}`); read as a std::optional (has_value, ->first).
class ValueRange : public std::optional<std::pair<double, double>> {
 public:
  ValueRange() = default;
  ValueRange(std::nullopt_t) {}
  ValueRange(double low, double high) : std::optional<std::pair<double, double>>(std::pair{low, high}) {}
};

struct MakeGridOptions {
  int64_t nrow = 8;                  // images per row of the grid
  int64_t padding = 2;               // pixels around and between the images
  bool normalize = false;            // shift and scale to [0, 1] (see above)
  ValueRange value_range = std::nullopt;  // (low, high) for normalize; default: the data's min and max
  bool scale_each = false;           // normalize each image by its own min and max
  double pad_value = 0.0;            // the padding's value
};

// torchvision.utils.make_grid(tensor, nrow, padding, normalize, value_range, scale_each,
// pad_value): [C, H', W'] on the input's device, in its dtype.
Tensor make_grid(const Tensor& tensor, const MakeGridOptions& options = {});
// The list form: the images (each [C, H, W] or [H, W], all alike) are stacked into a batch.
Tensor make_grid(const TensorList& tensors, const MakeGridOptions& options = {});

// save_image's options are make_grid's, in the same order (torchvision's **kwargs).
struct SaveImageOptions {
  int64_t nrow = 8;
  int64_t padding = 2;
  bool normalize = false;
  ValueRange value_range = std::nullopt;
  bool scale_each = false;
  double pad_value = 0.0;

  MakeGridOptions grid() const { return {nrow, padding, normalize, value_range, scale_each, pad_value}; }
};

// torchvision.utils.save_image(tensor, fp, **kwargs): make_grid(tensor, options), then an
// 8-bit PNG at `fp` (any floating dtype, any device: the bytes are computed where the tensor is,
// then copied to the host).
void save_image(const Tensor& tensor, const std::string& fp, const SaveImageOptions& options = {});
void save_image(const TensorList& tensors, const std::string& fp, const SaveImageOptions& options = {});

// False in a build without libpng (libpng-dev not found at configure time): save_image throws
// NotImplementedError, saying so; make_grid works either way.
bool png_output_available();

}  // namespace ember::io
