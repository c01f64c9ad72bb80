// io::export_onnx in a build without ONNX (libonnx-dev and libprotobuf-dev were not found at
// configure time; scripts/setup.sh installs them).
#include "ember/error.h"
#include "ember/io/onnx.h"

namespace ember::io {

namespace {
[[noreturn]] void unavailable() {
  throw NotImplementedError(
      "[export_onnx] this build of ember has no ONNX export: install libonnx-dev and libprotobuf-dev "
      "(Debian) and configure again");
}
}  // namespace

bool onnx_export_available() { return false; }

void export_onnx(nn::Module&, const OnnxForward&, const TensorList&, const std::string&, const OnnxExportOptions&) {
  unavailable();
}
void export_onnx(nn::Module&, const Tensor&, const std::string&, const OnnxExportOptions&) { unavailable(); }

}  // namespace ember::io
