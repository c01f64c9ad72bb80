// The process-wide determinism switch (PyTorch's torch.use_deterministic_algorithms).
//
// Note [Determinism]: what ember guarantees, with or without the switch, for the same
// program, inputs, seed and build on the same machine:
// - CPU kernels are bit-reproducible run to run: reductions add in a fixed order (a static
//   partition of the work, never one that depends on thread timing), OpenMP loops use static
//   schedules, and GEMMs go through Eigen with a fixed blocking. A result may still change
//   with the NUMBER of threads (OMP_NUM_THREADS): a parallel reduction splits its sum into
//   per-thread partials (docs/reliability.md lists which results do). One exception, as
//   cudnn.benchmark is PyTorch's: CPU convolutions measure their algorithm per shape in each
//   process (ops::set_conv_autotune, on by default), and two processes may measure different
//   winners, whose results differ in the last bits; the switch below (or the autotune off)
//   fixes the choice.
// - CUDA kernels of ember's own use no floating-point atomics where order matters (embedding,
//   index and scatter backward, max_pool2d backward, bias gradients reduce in a fixed order),
//   unless a program opts in: ops::set_attention_dq_atomics(true) (Note [attention dQ
//   atomics]) trades the flash backward's dQ reproducibility for speed.
// - RNG is counter-based (Philox) and seeded (manual_seed), so dropout masks replay.
// - Data loading delivers batches in index order whatever the number of workers.
// What the switch adds: code that could pick a nondeterministic implementation (cuDNN's
// convolution algorithm choice in ops/cuda/conv.cu, the CPU convolutions' measured choice in
// ops/cpu/conv.cpp) must pick a deterministic one when is_deterministic(), or throw rather
// than fall back; the attention dQ atomics are then
// ignored (the deterministic dQ kernel runs). TF32 does not affect determinism
// (it changes precision, not run-to-run results) and is left as it is.
#pragma once

namespace ember {

// Default false. Global (not thread-local): it describes the whole process's run.
void set_deterministic(bool enabled);
bool is_deterministic();

}  // namespace ember
