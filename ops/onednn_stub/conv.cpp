// A build without oneDNN (ops/cpu/onednn.h): no shape is supported, so ops/cpu/conv.cpp never
// calls the passes, which say so if it ever did.
#include "ember/error.h"
#include "onednn.h"

namespace ember::ops::cpu::onednn {

namespace {
[[noreturn]] void not_built() {
  throw NotImplementedError("[conv2d] this build of ember has no oneDNN (install libdnnl-dev and rebuild)");
}
}  // namespace

std::string version() { return ""; }
std::string kernel_name(Pass, const Shape&, const Shape&, const Conv2dParams&, bool, MemoryFormat) { return ""; }
bool supports(Pass, const Shape&, const Shape&, const Conv2dParams&, bool, MemoryFormat) { return false; }
void forward(const float*, const float*, const float*, float*, const Shape&, const Shape&, const Conv2dParams&, MemoryFormat) {
  not_built();
}
void backward_input(const float*, const float*, float*, const Shape&, const Shape&, const Conv2dParams&, MemoryFormat) {
  not_built();
}
void backward_weight(const float*, const float*, float*, const Shape&, const Shape&, const Conv2dParams&, MemoryFormat) {
  not_built();
}

}  // namespace ember::ops::cpu::onednn
