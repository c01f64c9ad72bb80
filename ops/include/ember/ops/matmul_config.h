// Process-wide matmul settings, as torch.backends.cuda.matmul.allow_tf32.
//
// allow_tf32 (default true): f32 GEMMs on CUDA (matmul, linear, and their backward) may run
// on TF32 tensor cores (inputs rounded to a 10-bit mantissa, f32 accumulation): ~8x the
// f32 throughput on sm_80+, at a relative error of ~1e-3 per product instead of ~1e-7.
// Off, they compute in exact f32 (CUBLAS_COMPUTE_32F). It changes nothing on the CPU and
// nothing for f16, bf16 or f64. Read at every call, so it may be flipped between calls; it
// is one atomic flag shared by all threads.
#pragma once

namespace ember::cuda {

void set_allow_tf32(bool allow);
bool allow_tf32();

// Sets allow_tf32 for a scope and puts the previous value back.
class AllowTF32Guard {
 public:
  explicit AllowTF32Guard(bool allow) : prev_(allow_tf32()) { set_allow_tf32(allow); }
  ~AllowTF32Guard() { set_allow_tf32(prev_); }
  AllowTF32Guard(const AllowTF32Guard&) = delete;
  AllowTF32Guard& operator=(const AllowTF32Guard&) = delete;

 private:
  bool prev_;
};

}  // namespace ember::cuda
