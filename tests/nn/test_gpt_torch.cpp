// nn::GPT against PyTorch, from ember's side: ember builds a GPT with its own initialization,
// runs one batch forward and backward, and saves weights, batch and results to safetensors;
// tests/fixtures/check_gpt_torch.py (numpy + torch, no ember) loads the weights into a
// nanoGPT-style PyTorch model written independently, reruns the batch and compares logits,
// loss and every gradient. (test_gpt.cpp checks the other direction: PyTorch's weights into
// ember.) Needs a python3 with torch (Debian's python3-torch; scripts/test.sh installs it);
// skipped without one. The CUDA case runs where both ember and torch see a GPU.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "support/test_support.h"

using namespace ember;
namespace fs = std::filesystem;

namespace {

// $EMBER_PYTHON, python3, or Debian's /usr/bin/python3: the first that imports torch.
const std::string& python_with_torch() {
  static const std::string found = [] {
    std::vector<std::string> candidates;
    if (const char* e = std::getenv("EMBER_PYTHON")) candidates.push_back(e);
    candidates.push_back("python3");
    candidates.push_back("/usr/bin/python3");
    for (const auto& c : candidates)
      if (std::system((c + " -c 'import torch' >/dev/null 2>&1").c_str()) == 0) return c;
    return std::string();
  }();
  return found;
}

nn::GPTConfig check_config() {
  nn::GPTConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 32;
  c.block_size = 16;
  c.vocab_size = 61;
  c.padded_vocab_size = 64;
  return c;
}

// Runs the check for a model in `dt` on `dev`; returns the script's exit status and output.
std::pair<int, std::string> check_against_torch(DType dt, Device dev, double rtol) {
  const nn::GPTConfig c = check_config();
  manual_seed(77);
  nn::GPT model(c);
  // GPT-2's init is small (std 0.02): larger LayerNorm affines and weights make attention and
  // the LayerNorms far from trivial, so a wrong formula cannot hide.
  {
    NoGradGuard no_grad;
    for (auto& [name, p] : model.named_parameters()) {
      Tensor noise = randn(p.sizes(), p.dtype()) * (name.find("ln_") != std::string::npos ? 0.2 : 0.3);
      p.copy_(name.find("ln_") != std::string::npos && name.find("weight") != std::string::npos ? noise + 1.0 : noise);
      // The padded vocabulary rows stay zero, as nn::GPT keeps them.
      if (name.rfind("wte", 0) == 0) p.narrow(0, c.vocab_size, c.padded_vocab_size - c.vocab_size).zero_();
    }
  }
  model.to(dt);
  model.to(dev);
  Tensor idx = randint(0, c.vocab_size, {2, c.block_size}, DType::i64);
  Tensor targets = randint(0, c.vocab_size, {2, c.block_size}, DType::i64);
  Tensor logits = model.forward(idx.to(dev));
  Tensor loss = model.forward(idx.to(dev), targets.to(dev));
  loss.backward();

  StateDict out;
  for (auto& [name, t] : model.state_dict()) out.insert("state." + name, t.to(Device::cpu()));
  out.insert("idx", idx);
  out.insert("targets", targets);
  out.insert("logits", logits.detach().to(Device::cpu()));
  out.insert("loss", loss.detach().to(Device::cpu()).reshape({1}));
  for (auto& [name, p] : model.named_parameters()) out.insert("grad." + name, p.grad().to(Device::cpu()));
  const fs::path dir = fs::temp_directory_path() / ("ember_gpt_torch_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const fs::path file = dir / "gpt.safetensors", log = dir / "check.log";
  io::save_safetensors(out, file.string());

  std::ostringstream cmd;
  cmd << python_with_torch() << " '" << EMBER_TEST_DATA_DIR << "/check_gpt_torch.py' '" << file.string()
      << "' --n-layer " << c.n_layer << " --n-head " << c.n_head << " --n-embd " << c.n_embd << " --vocab "
      << c.vocab_size << " --padded " << c.padded_vocab_size << " --block " << c.block_size << " --device "
      << (dev.is_cuda() ? "cuda" : "cpu") << " --rtol " << rtol << " >'" << log.string() << "' 2>&1";
  const int raw = std::system(cmd.str().c_str());
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  fs::remove_all(dir);
  return {WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, cmd.str() + "\n" + text.str()};
}

}  // namespace

TEST(GPTTorch, EmberWeightsGiveTorchsLogitsLossAndGradients) {
  if (python_with_torch().empty()) GTEST_SKIP() << "no python3 with torch (Debian: python3-torch)";
  {
    auto [status, output] = check_against_torch(DType::f64, Device::cpu(), 1e-10);
    EXPECT_EQ(status, 0) << output;
    std::printf("%s", output.substr(output.rfind("torch ")).c_str());
  }
  {
    auto [status, output] = check_against_torch(DType::f32, Device::cpu(), 2e-5);
    EXPECT_EQ(status, 0) << output;
    std::printf("%s", output.substr(output.rfind("torch ")).c_str());
  }
}

TEST(GPTTorch, OnCudaInF32) {
  EMBER_SKIP_WITHOUT_CUDA();
  if (python_with_torch().empty()) GTEST_SKIP() << "no python3 with torch";
  const bool tf32 = cuda::allow_tf32();
  cuda::set_allow_tf32(false);
  auto [status, output] = check_against_torch(DType::f32, Device::cuda(), 1e-4);
  cuda::set_allow_tf32(tf32);
  if (status == 77) GTEST_SKIP() << "torch sees no GPU: " << output;
  EXPECT_EQ(status, 0) << output;
}
