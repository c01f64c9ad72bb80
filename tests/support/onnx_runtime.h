// Runs exported ONNX models in ONNX Runtime (npm onnxruntime-node, fetched by
// `bash scripts/fetch_data.sh onnxruntime`, which scripts/test.sh does) through
// tests/support/onnx_run.js.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "ember/tensor.h"

namespace ember::test {

struct OnnxRun {
  TensorList outputs;                     // in the model's output order, on the CPU
  std::vector<std::string> input_names;   // the model's, as ONNX Runtime reads them
  std::vector<std::string> output_names;
};

// Empty when node and onnxruntime-node are there; otherwise why not (a test skips with it).
std::string onnxruntime_missing();

// Runs the repository's Node.js script `script` (a path under the repository's root) with
// onnxruntime-node on its module path: its exit status, and stdout + stderr in `output`.
int run_node_script(const std::string& script, const std::string& args, std::string& output);

// Runs `model` on the named inputs; throws std::runtime_error with ONNX Runtime's message.
OnnxRun run_onnxruntime(const std::string& model, const std::vector<std::pair<std::string, Tensor>>& inputs);

}  // namespace ember::test
