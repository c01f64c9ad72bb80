// Winograd F(2x2, 3x3) convolution on the CPU: the fast path of ops/cpu/conv.cpp for 3x3,
// stride-1, undilated convolutions with enough channels. See Note [Winograd convolution] in
// ops/cpu/winograd.cpp.
#pragma once
#include <cstdint>

namespace ember::ops::cpu::winograd {

// One 3x3 / stride 1 / dilation 1 convolution: x [N, C, H, W], w [O, C / groups, 3, 3],
// y [N, O, Ho, Wo] with Ho = H + 2 ph - 2, Wo = W + 2 pw - 2. Buffers are dense NCHW.
struct Problem {
  int64_t N, C, H, W, O, ph, pw, groups;
  int64_t Ho() const { return H + 2 * ph - 2; }
  int64_t Wo() const { return W + 2 * pw - 2; }
};

// Whether the Winograd path computes this problem (channels enough to repay the transforms,
// padding <= 2 so the input gradient is itself a convolution of the same kind).
bool eligible(const Problem& p);

template <class T>
void forward(const T* x, const T* w, const T* bias, T* y, const Problem& p);
// gx [N, C, H, W] = the input gradient for gy [N, O, Ho, Wo] (overwritten, not accumulated).
template <class T>
void backward_input(const T* gy, const T* w, T* gx, const Problem& p);
// gw [O, C / groups, 3, 3] = the weight gradient (overwritten).
template <class T>
void backward_weight(const T* gy, const T* x, T* gw, const Problem& p);

}  // namespace ember::ops::cpu::winograd
