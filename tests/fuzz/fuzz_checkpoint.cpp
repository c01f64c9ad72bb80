// libFuzzer target: see ember_fuzz::run_checkpoint in harness.h for the input format.
#include "harness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ember_fuzz::run_checkpoint(data, size);
  return 0;
}
