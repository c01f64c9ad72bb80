// ONNX export: a model trained with ember, written as an ONNX file that ONNX Runtime (or
// TensorRT, or a phone's runtime) runs. PyTorch's exporter exists only in Python; this one is
// C++ and needs no Python.
//
//   io::export_onnx(net, x, "net.onnx", {.input_names = {"image"}, .output_names = {"logits"},
//                                        .dynamic_axes = {{"image", {{0, "batch"}}}}});
//
// How (Note [onnx export] in io/onnx/export.cpp): the forward runs twice with a Tracer on the
// thread (Note [tracing]): once on the example, once on an example with other values and every
// dynamic axis one longer. The two traces must agree op for op; what differs between them tells
// which sizes follow the dynamic axes. Each op becomes standard ONNX opset-17 nodes (GELU,
// RMSNorm, GroupNorm and the fused ops decomposed; no custom op is ever written); parameters and
// buffers become initializers under their state_dict names; the model is checked by ONNX's own
// checker and strict shape inference before it is written (atomically).
//
// Errors (ember::ValueError, naming the op): an op without an ONNX form; a tensor the graph
// reads that no exported op produced and that is not the same in both traces (computed from
// the inputs by an op the exporter cannot see, or sized by a dynamic axis); a value modified in
// place after it was produced; a forward whose ops depend on the input's values or sizes.
// The module runs in eval mode during export (its mode is restored afterwards).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "ember/tensor.h"

namespace ember::nn {
class Module;
}

namespace ember::io {

// Fields in torch.onnx.export's argument order (tests/fixtures/make_options_order.py).
struct OnnxExportOptions {
  // Graph input and output names; default "input" / "output" for one, "input_0", "input_1", ...
  // for several.
  std::vector<std::string> input_names = {};
  std::vector<std::string> output_names = {};
  // The ONNX operator set the graph is written in (17 only, for now).
  int64_t opset_version = 17;
  // Axes whose size may change at run time, by input (or output) name: {"image", {{0, "batch"}}}.
  // Other input dims are fixed at the example's sizes. An output's dims that follow a dynamic
  // input axis are found by the trace and named after it (an entry here renames them).
  std::map<std::string, std::map<int64_t, std::string>> dynamic_axes = {};
  // The model's doc_string.
  std::string doc_string = {};
};

// The forward of a model with several inputs or outputs.
using OnnxForward = std::function<TensorList(const TensorList&)>;

// Exports model.forward(example_input).
void export_onnx(nn::Module& model, const Tensor& example_input, const std::string& path,
                 const OnnxExportOptions& options = {});
// Exports forward(example_inputs); `model` holds its parameters and buffers (initializer names).
void export_onnx(nn::Module& model, const OnnxForward& forward, const TensorList& example_inputs,
                 const std::string& path, const OnnxExportOptions& options = {});

// False in a build without ONNX (libonnx-dev not found at configure time): export_onnx throws.
bool onnx_export_available();

}  // namespace ember::io
