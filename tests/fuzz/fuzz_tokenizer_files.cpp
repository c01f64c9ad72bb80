// libFuzzer target: see ember_fuzz::run_tokenizer_files in harness_text.h for the input format.
#include "harness_text.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ember_fuzz::run_tokenizer_files(data, size);
  return 0;
}
