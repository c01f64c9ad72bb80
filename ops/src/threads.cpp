#include "ember/threads.h"

#include <omp.h>

#include "ember/error.h"

namespace ember {

void set_num_threads(int n) {
  EMBER_CHECK(n >= 1, ValueError, "[set_num_threads] the number of threads must be at least 1, got ", n);
  omp_set_num_threads(n);
}

int get_num_threads() { return omp_get_max_threads(); }

}  // namespace ember
