// The CPU's thread count (PyTorch's torch.set_num_threads / get_num_threads).
//
// ember's CPU kernels and Eigen's GEMMs run their parallel regions with OpenMP. By default they
// use OMP_NUM_THREADS, else every hardware thread. set_num_threads(n) sets the number for the
// parallel regions the calling thread starts from then on (OpenMP's per-thread setting: the
// training loop's thread, where a step's ops run; data loader workers keep their own).
#pragma once

namespace ember {

// Throws ValueError for n < 1.
void set_num_threads(int n);
// What the calling thread's next parallel region will use at most.
int get_num_threads();

}  // namespace ember
