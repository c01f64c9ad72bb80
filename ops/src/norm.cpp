// Front of the fused normalization family (batch norm, group norm, RMS norm): validation,
// the one canonical geometry the drivers see (contiguous x as [N, C, HW] or [rows, cols]),
// and the per-channel tensors in the stats dtype (kernels/norm.h). Parameters are [C] or
// [cols]: converting them (a 16-bit weight for an f32 computation) costs nothing next to x.
// Running statistics of another dtype or layout are updated through a stats-dtype copy that
// is written back, so the kernels update only contiguous stats-dtype buffers.
#include "ember/ops/norm.h"

#include <cmath>
#include <limits>

#include "ember/ops/elementwise.h"
#include "kernels/norm.h"

namespace ember::ops {

namespace {

bool is_16bit(DType t) { return t == DType::f16 || t == DType::bf16; }

Tensor cast(const Tensor& t, DType dtype) {
  return t.dtype() == dtype ? t : to(t, t.device(), dtype);
}

void check_floating(const char* op, const Tensor& t, const char* what) {
  EMBER_CHECK(is_floating(t.dtype()), DTypeError, "[", op, "] expects a floating-point ", what,
              ", got ", t.dtype(), " (convert it with to() first)");
}

// A per-channel (or per-feature) tensor of `shape`, in x's dtype or f32 for a 16-bit x, as a
// contiguous tensor in the stats dtype (undefined stays undefined).
Tensor param_arg(const char* op, const Tensor& t, const char* what, const Tensor& x,
                 const Shape& shape) {
  if (!t.defined()) return t;
  detail::check_same_device(op, x, t);
  EMBER_CHECK(t.sizes() == shape, ShapeError, "[", op, "] ", what, " of shape ", t.sizes(),
              " must have shape ", shape);
  EMBER_CHECK(t.dtype() == x.dtype() || (is_16bit(x.dtype()) && t.dtype() == DType::f32),
              DTypeError, "[", op, "] ", what, " has dtype ", t.dtype(), " but the input has dtype ",
              x.dtype(), " (a 16-bit input also takes f32 parameters)");
  return contiguous(cast(t, stats_dtype(x.dtype())));
}

struct Nchw {
  int64_t N, C, HW;
};
Nchw nchw(const char* op, const Tensor& x) {
  detail::check_defined(op, x);
  check_floating(op, x, "input");
  EMBER_CHECK(x.dim() >= 2, ShapeError, "[", op, "] expects an input of shape [N, C, *], got ",
              x.sizes());
  Nchw g{x.sizes()[0], x.sizes()[1], 1};
  for (int64_t d = 2; d < x.dim(); ++d) g.HW *= x.sizes()[d];
  return g;
}

// The output gradient as the kernels read it: x's shape, dtype and a dense layout (`format`).
Tensor grad_arg(const char* op, const Tensor& grad, const Tensor& x,
                MemoryFormat format = MemoryFormat::contiguous) {
  detail::check_defined(op, grad, "gradient");
  detail::check_same_device(op, grad, x);
  EMBER_CHECK(grad.sizes() == x.sizes(), ShapeError, "[", op, "] gradient of shape ",
              grad.sizes(), " does not match the input shape ", x.sizes());
  return contiguous(cast(grad, x.dtype()), format);
}

// Batch norm keeps a channels_last CPU input's layout (Note [Memory format]): its kernels see
// it as [N*H*W, C] rows, the channels innermost, as they see a [N, C] input.
MemoryFormat cpu_format(const Tensor& x) {
  return x.is_cpu() ? x.suggest_memory_format() : MemoryFormat::contiguous;
}
Nchw kernel_geometry(MemoryFormat format, const Nchw& g) {
  if (format == MemoryFormat::channels_last) return {g.N * g.HW, g.C, 1};
  return g;
}

// A running statistic as the kernel updates it: itself when contiguous in the stats dtype,
// else a copy (written back by finish_running).
Tensor running_arg(const char* op, const Tensor& r, const char* what, const Tensor& x, int64_t C) {
  if (!r.defined()) return r;
  detail::check_same_device(op, x, r);
  EMBER_CHECK(r.numel() == C && r.dim() == 1, ShapeError, "[", op, "] ", what, " of shape ",
              r.sizes(), " must have shape [", C, "] (the input's channels)");
  check_floating(op, r, what);
  const DType st = stats_dtype(x.dtype());
  if (r.dtype() == st && r.is_contiguous()) return r;
  Tensor work = detail::make_tensor({C}, st, r.device());
  copy_(work, r);
  return work;
}
void finish_running(const Tensor& user, const Tensor& work) {
  if (!user.defined()) return;
  if (work.impl() != user.impl()) copy_(user, work);
  user.bump_version();
}

}  // namespace

BatchNormForward batch_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                    const Tensor& running_mean, const Tensor& running_var,
                                    bool training, double momentum, double eps) {
  const char* op = "batch_norm";
  const Nchw g = nchw(op, x);
  const Shape cshape{g.C};
  const Tensor w = param_arg(op, weight, "weight", x, cshape);
  const Tensor b = param_arg(op, bias, "bias", x, cshape);
  EMBER_CHECK(running_mean.defined() == running_var.defined(), ValueError, "[", op,
              "] running_mean and running_var must both be given or both be undefined");
  EMBER_CHECK(training || running_mean.defined(), ValueError, "[", op,
              "] running_mean and running_var are required when training is false");
  EMBER_CHECK(eps >= 0.0, ValueError, "[", op, "] eps must be >= 0, got ", eps);
  const int64_t per_channel = g.N * g.HW;
  EMBER_CHECK(!training || per_channel != 1, ValueError, "[", op,
              "] expected more than 1 value per channel when training, got input of shape ",
              x.sizes());
  const Tensor rm = running_arg(op, running_mean, "running_mean", x, g.C);
  const Tensor rv = running_arg(op, running_var, "running_var", x, g.C);

  const DType st = stats_dtype(x.dtype());
  const MemoryFormat format = cpu_format(x);
  const Nchw k = kernel_geometry(format, g);
  BatchNormForward out;
  out.y = detail::make_tensor(x.sizes(), x.dtype(), x.device(), format);
  out.mean = detail::make_tensor({g.C}, st, x.device());
  out.invstd = detail::make_tensor({g.C}, st, x.device());
  if (g.C == 0) return out;
  if (per_channel == 0) {  // PyTorch: NaN statistics, an empty output, running stats as NaN
    fill_(out.mean, std::numeric_limits<double>::quiet_NaN());
    fill_(out.invstd, std::numeric_limits<double>::quiet_NaN());
    return out;
  }
  EMBER_DISPATCH_KERNEL(x.device(), batch_norm_fwd_kernel, contiguous(x, format), w, b, out.y, out.mean,
                        out.invstd, rm, rv, k.N, k.C, k.HW, training, momentum, eps);
  if (training) {
    finish_running(running_mean, rm);
    finish_running(running_var, rv);
  }
  return out;
}

NormBackward batch_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& weight,
                                 const Tensor& mean, const Tensor& invstd, bool training,
                                 std::array<bool, 3> needs) {
  const char* op = "batch_norm_backward";
  const Nchw g = nchw(op, x);
  const MemoryFormat format = cpu_format(x);
  const Tensor gr = grad_arg(op, grad, x, format);
  const Tensor w = param_arg(op, weight, "weight", x, {g.C});
  const DType st = stats_dtype(x.dtype());
  const Nchw k = kernel_geometry(format, g);
  NormBackward out;
  if (needs[0]) out.dx = detail::make_tensor(x.sizes(), x.dtype(), x.device(), format);
  if (needs[1]) out.dweight = detail::make_tensor({g.C}, st, x.device());
  if (needs[2]) out.dbias = detail::make_tensor({g.C}, st, x.device());
  if (x.numel() == 0) {
    if (needs[1]) fill_(out.dweight, 0);
    if (needs[2]) fill_(out.dbias, 0);
    return out;
  }
  EMBER_DISPATCH_KERNEL(x.device(), batch_norm_bwd_kernel, gr, contiguous(x, format), w, mean, invstd,
                        out.dx, out.dweight, out.dbias, k.N, k.C, k.HW, training);
  return out;
}

GroupNormForward group_norm_forward(const Tensor& x, int64_t num_groups, const Tensor& weight,
                                    const Tensor& bias, double eps) {
  const char* op = "group_norm";
  const Nchw g = nchw(op, x);
  EMBER_CHECK(num_groups > 0 && g.C % num_groups == 0, ValueError, "[", op,
              "] expected the number of channels ", g.C, " to be divisible by num_groups ",
              num_groups);
  const Tensor w = param_arg(op, weight, "weight", x, {g.C});
  const Tensor b = param_arg(op, bias, "bias", x, {g.C});
  EMBER_CHECK(eps >= 0.0, ValueError, "[", op, "] eps must be >= 0, got ", eps);
  const DType st = stats_dtype(x.dtype());
  GroupNormForward out;
  out.y = detail::make_tensor(x.sizes(), x.dtype(), x.device());
  out.mean = detail::make_tensor({g.N, num_groups}, st, x.device());
  out.rstd = detail::make_tensor({g.N, num_groups}, st, x.device());
  if (x.numel() == 0) return out;
  EMBER_DISPATCH_KERNEL(x.device(), group_norm_fwd_kernel, contiguous(x), w, b, out.y, out.mean,
                        out.rstd, g.N, g.C, g.HW, num_groups, eps);
  return out;
}

NormBackward group_norm_backward(const Tensor& grad, const Tensor& x, int64_t num_groups,
                                 const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                                 std::array<bool, 3> needs) {
  const char* op = "group_norm_backward";
  const Nchw g = nchw(op, x);
  const Tensor gr = grad_arg(op, grad, x);
  const Tensor w = param_arg(op, weight, "weight", x, {g.C});
  const DType st = stats_dtype(x.dtype());
  NormBackward out;
  if (needs[0]) out.dx = detail::make_tensor(x.sizes(), x.dtype(), x.device());
  if (needs[1]) out.dweight = detail::make_tensor({g.C}, st, x.device());
  if (needs[2]) out.dbias = detail::make_tensor({g.C}, st, x.device());
  if (x.numel() == 0) {
    if (needs[1]) fill_(out.dweight, 0);
    if (needs[2]) fill_(out.dbias, 0);
    return out;
  }
  EMBER_DISPATCH_KERNEL(x.device(), group_norm_bwd_kernel, gr, contiguous(x), w, mean, rstd,
                        out.dx, out.dweight, out.dbias, g.N, g.C, g.HW, num_groups);
  return out;
}

namespace {
int64_t rms_rows(const char* op, const Tensor& x, const Shape& ns) {
  detail::check_defined(op, x);
  check_floating(op, x, "input");
  const int64_t k = int64_t(ns.size());
  EMBER_CHECK(k >= 1, ShapeError, "[", op, "] normalized_shape must name at least one dim");
  bool suffix = x.dim() >= k;
  for (int64_t i = 0; suffix && i < k; ++i) suffix = x.sizes()[x.dim() - k + i] == ns[i];
  EMBER_CHECK(suffix, ShapeError, "[", op, "] normalized_shape ", ns,
              " does not match the trailing dims of the input of shape ", x.sizes());
  int64_t rows = 1;
  for (int64_t i = 0; i < x.dim() - k; ++i) rows *= x.sizes()[i];
  return rows;
}
}  // namespace

RmsNormForward rms_norm_forward(const Tensor& x, const Shape& ns, const Tensor& weight,
                                double eps) {
  const char* op = "rms_norm";
  const int64_t rows = rms_rows(op, x, ns);
  const Tensor w = param_arg(op, weight, "weight", x, ns);
  EMBER_CHECK(eps >= 0.0, ValueError, "[", op, "] eps must be >= 0, got ", eps);
  RmsNormForward out;
  out.y = detail::make_tensor(x.sizes(), x.dtype(), x.device());
  out.rstd = detail::make_tensor({rows}, stats_dtype(x.dtype()), x.device());
  if (x.numel() == 0) return out;
  EMBER_DISPATCH_KERNEL(x.device(), rms_norm_fwd_kernel, contiguous(x), w, out.y, out.rstd,
                        ns.numel(), eps);
  return out;
}

NormBackward rms_norm_backward(const Tensor& grad, const Tensor& x, const Shape& ns,
                               const Tensor& weight, const Tensor& rstd,
                               std::array<bool, 2> needs) {
  const char* op = "rms_norm_backward";
  rms_rows(op, x, ns);
  const Tensor gr = grad_arg(op, grad, x);
  const Tensor w = param_arg(op, weight, "weight", x, ns);
  NormBackward out;
  if (needs[0]) out.dx = detail::make_tensor(x.sizes(), x.dtype(), x.device());
  if (needs[1]) out.dweight = detail::make_tensor(ns, stats_dtype(x.dtype()), x.device());
  if (x.numel() == 0) {
    if (needs[1]) fill_(out.dweight, 0);
    return out;
  }
  EMBER_DISPATCH_KERNEL(x.device(), rms_norm_bwd_kernel, gr, contiguous(x), w, rstd, out.dx,
                        out.dweight, ns.numel());
  return out;
}

}  // namespace ember::ops
