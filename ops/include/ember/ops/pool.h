// Average and adaptive pooling, resampling (nearest, bilinear) and padding, forward and
// backward, NCHW: the autograd-oblivious front. Arguments are validated here (messages name
// the op, shapes and parameters); inputs are made contiguous before the kernels see them.
// Every backward here is a gather (each input element sums the outputs that read it, in a
// fixed order), so CPU and CUDA are deterministic and use no atomics. adaptive_max_pool2d's
// backward is max_pool2d_backward (ember/ops/conv.h): same index convention.
#pragma once

#include <array>
#include <optional>
#include <vector>

#include "ember/tensor.h"

namespace ember::ops {

struct AvgPool2dParams {
  std::array<int64_t, 2> kernel{1, 1};
  std::array<int64_t, 2> stride{1, 1};
  std::array<int64_t, 2> padding{0, 0};  // zeros on both sides, at most kernel / 2
  bool ceil_mode = false;
  bool count_include_pad = true;
  int64_t divisor_override = 0;  // 0: none
};

// PyTorch's pooling output extent (pooling_output_shape): with ceil_mode the last window may
// start in the right padding but not past it.
int64_t pool_output_size(int64_t in, int64_t kernel, int64_t stride, int64_t padding, bool ceil_mode);

// x [N, C, H, W] -> [N, C, Ho, Wo].
Tensor avg_pool2d(const Tensor& x, const AvgPool2dParams& p);
Tensor avg_pool2d_backward(const Tensor& grad, const Shape& input_sizes, const AvgPool2dParams& p);

// Adaptive bins: output i of an input extent H averages (or takes the max of)
// [floor(i * H / out), ceil((i + 1) * H / out)). A 1x1 output is a per-plane mean.
Tensor adaptive_avg_pool2d(const Tensor& x, std::array<int64_t, 2> output_size);
Tensor adaptive_avg_pool2d_backward(const Tensor& grad, const Shape& input_sizes);
// Values and i64 indices (flat h * W + w in the input plane); NaN wins, ties keep the first.
ValuesIndices adaptive_max_pool2d(const Tensor& x, std::array<int64_t, 2> output_size);

enum class InterpolateMode { nearest, bilinear };

// The source-index scale of each spatial dim follows PyTorch (area_pixel_compute_scale):
// scale[i] > 0 is a user-given scale_factor (used as 1 / scale), otherwise in / out.
struct Upsample2dParams {
  InterpolateMode mode = InterpolateMode::nearest;
  bool align_corners = false;
  std::array<double, 2> scale{0, 0};
};

// x [N, C, H, W] -> [N, C, out[0], out[1]].
Tensor upsample2d(const Tensor& x, std::array<int64_t, 2> output_size, const Upsample2dParams& p);
Tensor upsample2d_backward(const Tensor& grad, const Shape& input_sizes, const Upsample2dParams& p);

enum class PadMode { constant, reflect, replicate };

// pad = {last_lo, last_hi, second_last_lo, ...}, at most 3 trailing dims (PyTorch's order).
// constant: pads may be negative (cropping); reflect: each pad < that dim's size; replicate:
// each dim non-empty.
Tensor pad(const Tensor& x, const std::vector<int64_t>& pad, PadMode mode, double value = 0);
// The adjoint of pad (x of input_sizes): for constant, the cropped window of grad (zeros
// where the input was cropped away); for reflect and replicate, each input element sums
// the outputs that copied it.
Tensor pad_backward(const Tensor& grad, const Shape& input_sizes, const std::vector<int64_t>& pad, PadMode mode);

}  // namespace ember::ops
