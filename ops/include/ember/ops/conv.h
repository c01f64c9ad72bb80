// 2-D convolution and max pooling (NCHW), forward and backward: the autograd-oblivious
// front. Arguments are validated here (messages name the shapes and parameters); inputs
// are made contiguous before the backend kernels see them.
#pragma once

#include <array>
#include <string>

#include "ember/tensor.h"

namespace ember::ops {

struct Conv2dParams {
  std::array<int64_t, 2> stride{1, 1};
  std::array<int64_t, 2> padding{0, 0};  // zeros on both sides
  std::array<int64_t, 2> dilation{1, 1};
  int64_t groups = 1;
};

struct Pool2dParams {
  std::array<int64_t, 2> kernel{1, 1};
  std::array<int64_t, 2> stride{1, 1};
  std::array<int64_t, 2> padding{0, 0};  // -inf on both sides, at most kernel / 2
};

// Output spatial size of a convolution (pooling is the dilation-1 case):
// floor((in + 2 * padding - dilation * (kernel - 1) - 1) / stride) + 1.
int64_t conv_output_size(int64_t in, int64_t kernel, int64_t stride, int64_t padding, int64_t dilation);

// Process-wide CPU convolution setting, like torch.backends.*: whether 3x3, stride-1,
// undilated convolutions with >= 16 channels in and out per group (padding <= 2) may run as
// Winograd F(2x2, 3x3) (2.25x fewer multiplications than im2col + GEMM, rounding a few ulps
// larger: f32 ~1e-6 relative) in the forward and both gradients. Default true, or false
// when the environment has EMBER_CONV_WINOGRAD=0. With this and set_conv_onednn off, every
// CPU convolution is im2col + GEMM. CUDA convolutions are cuDNN's choice either way. Read at every call; one atomic flag
// shared by all threads.
void set_conv_winograd(bool allow);
bool conv_winograd();

// torch.backends.mkldnn.enabled: whether CPU convolutions may run on oneDNN (the library
// PyTorch's CPU convolutions use), where this build has it (onednn_version() is not empty)
// and oneDNN has an optimized kernel for the shape; f32 (and f16/bf16, computed in f32) only.
// Default true, or false when the environment has EMBER_CONV_ONEDNN=0. Read at every call.
void set_conv_onednn(bool allow);
bool conv_onednn();
// "oneDNN 2.6.3" when this build has oneDNN, else "".
std::string onednn_version();

// How a CPU convolution chooses among the algorithms allowed above (oneDNN, Winograd,
// im2col + GEMM), per pass (Note [CPU convolution algorithms] in ops/cpu/conv.cpp). On (the
// default; EMBER_CONV_AUTOTUNE=0 turns it off): the first call of each geometry times each
// allowed algorithm on the call's own buffers and later calls run the fastest, like cuDNN's
// benchmark mode; the choice can differ between runs, and with it the last bits of the
// results. Off, or under set_deterministic(true): a fixed order, the first that applies of
// oneDNN, Winograd, im2col. Inside a caller's OpenMP parallel region: the first of Winograd,
// im2col (oneDNN's kernels are not made to run nested). Read at every call.
void set_conv_autotune(bool on);
bool conv_autotune();

enum class ConvPass { forward, backward_input, backward_weight };
// The CPU algorithm a convolution of this geometry runs for a pass: "onednn:<oneDNN's kernel
// name>", "winograd" or "im2col" (what the measurement chose when it has run; the fixed
// order's choice otherwise, as the call would be made now). x [N, C, H, W], w [O, C / groups,
// kH, kW]; f16 and bf16 answer as f32, in which they compute. `format` is the activations'
// layout (a channels_last convolution reads and writes NHWC: oneDNN without reorders).
std::string cpu_conv_algorithm(ConvPass pass, const Shape& x, const Shape& w, const Conv2dParams& p,
                               DType dtype = DType::f32, bool bias = false,
                               MemoryFormat format = MemoryFormat::contiguous);

// The most workspace a cuDNN convolution algorithm may take, in bytes (default 1 GiB, or
// EMBER_CUDNN_WORKSPACE_LIMIT_MB). cuDNN's heuristics rank the algorithms; a CUDA convolution
// runs the first one whose workspace is under this limit and can be allocated, so a nearly
// full card falls back to a leaner algorithm instead of failing. Negative: no limit.
void set_cudnn_workspace_limit(int64_t bytes);
int64_t cudnn_workspace_limit();

// torch.backends.cudnn.benchmark: on, the first CUDA convolution of each geometry (per pass,
// dtype and math) times cuDNN's algorithms on the call's own buffers (cudnnFind*AlgorithmEx,
// with a workspace up to the largest the heuristics' candidates need within the limit above)
// and ranks them by measured time; later calls of that geometry run the fastest, from a
// cache. The measurement synchronizes the device once per geometry, so it is skipped while
// the stream is being captured into a CUDA graph (the heuristics' ranking serves, and the
// geometry is measured at its next uncaptured call). Under set_deterministic(true) only
// deterministic algorithms are measured. Default false (cuDNN's heuristics alone, no
// synchronization), or true when the environment has EMBER_CUDNN_BENCHMARK=1. Read at every
// call; one atomic flag shared by all threads.
void set_cudnn_benchmark(bool on);
bool cudnn_benchmark();

// x [N, C, H, W], weight [O, C / groups, kH, kW], bias [O] or undefined -> [N, O, Ho, Wo].
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p);
// Gradients of conv2d given grad [N, O, Ho, Wo]: w.r.t. the input (of shape input_sizes),
// the weight (of shape weight_sizes) and the bias ([O]).
Tensor conv2d_backward_input(const Tensor& grad, const Tensor& weight, const Shape& input_sizes,
                             const Conv2dParams& p);
Tensor conv2d_backward_weight(const Tensor& grad, const Tensor& x, const Shape& weight_sizes,
                              const Conv2dParams& p);
Tensor conv2d_backward_bias(const Tensor& grad);

// x [N, C, H, W] -> values [N, C, Ho, Wo] and i64 indices of the maxima, each the flat
// position h * W + w inside its input plane (PyTorch's convention). NaN wins; ties keep the
// first position in the window.
ValuesIndices max_pool2d(const Tensor& x, const Pool2dParams& p);
// Routes grad [N, C, Ho, Wo] to the argmax positions: a zero-filled tensor of input_sizes
// with each grad added at its index.
Tensor max_pool2d_backward(const Tensor& grad, const Tensor& indices, const Shape& input_sizes);
// The adjoint of max_pool2d_backward: picks grad_input's values at the indices
// ([N, C, H, W] -> indices' shape). Used for double backward.
Tensor max_pool2d_gather(const Tensor& grad_input, const Tensor& indices);

}  // namespace ember::ops
