// oneDNN (the library PyTorch's CPU convolutions use) as one of the CPU convolution backends
// ops/cpu/conv.cpp chooses from (Note [CPU convolution algorithms] there). Compiled from
// ops/onednn/conv.cpp where the build found oneDNN 2.x (Debian libdnnl-dev), else from
// ops/onednn_stub/conv.cpp, whose supports() is always false.
//
// f32 only; weights are dense OIHW, activations (x, y and their gradients) dense NCHW or, for
// a channels_last model (Note [Memory format]), dense NHWC: `format` says which. On NCHW,
// oneDNN's fast kernels want blocked layouts (nChw16c on AVX-512, nChw8c on AVX2): each call
// reorders its inputs into such buffers and its output back, in workspace taken from ember's
// CPU allocator (freed at the end of the call). NHWC its kernels read and write as it is, so
// only the small weights are reordered. Primitives are created once per shape and cached.
#pragma once

#include <cstdint>
#include <string>

#include "ember/ops/conv.h"
#include "ember/shape.h"
#include "ember/tensor.h"

namespace ember::ops::cpu::onednn {

using Pass = ConvPass;

// "oneDNN 2.6.3" where compiled in, else "".
std::string version();

// Whether oneDNN computes this pass of this f32 convolution with one of its optimized
// kernels (not its reference loops, which are far slower than ember's own). x [N, C, H, W],
// w [O, C / groups, kH, kW]; bias only matters to the forward. False in a build without oneDNN.
bool supports(Pass pass, const Shape& x, const Shape& w, const Conv2dParams& p, bool bias = false,
              MemoryFormat format = MemoryFormat::contiguous);
// The name oneDNN gives the kernel of that pass ("jit:avx512_core", ...), "" if unsupported.
std::string kernel_name(Pass pass, const Shape& x, const Shape& w, const Conv2dParams& p, bool bias = false,
                        MemoryFormat format = MemoryFormat::contiguous);

// The three passes, each only where supports() said so. Outputs are overwritten.
void forward(const float* x, const float* w, const float* bias, float* y, const Shape& xs, const Shape& ws,
             const Conv2dParams& p, MemoryFormat format);
void backward_input(const float* gy, const float* w, float* gx, const Shape& xs, const Shape& ws,
                    const Conv2dParams& p, MemoryFormat format);
void backward_weight(const float* gy, const float* x, float* gw, const Shape& xs, const Shape& ws,
                     const Conv2dParams& p, MemoryFormat format);

}  // namespace ember::ops::cpu::onednn
