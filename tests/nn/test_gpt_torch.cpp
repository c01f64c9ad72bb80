// nn::GPT and nn::Llama against PyTorch, from ember's side: ember builds a model with its own
// initialization, runs one batch forward and backward, and saves weights, batch and results to
// safetensors; tests/fixtures/check_gpt_torch.py (numpy + torch, no ember) loads the weights
// into a nanoGPT-style (or HF-Llama-style) PyTorch model written independently, reruns the
// batch and compares logits, loss and every gradient. (test_gpt.cpp checks the other direction: PyTorch's weights into
// ember.) Needs a python3 with torch (Debian's python3-torch; scripts/test.sh installs it);
// skipped without one. The CUDA case runs where both ember and torch see a GPU.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
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

nn::GPTConfig gpt_config() {
  nn::GPTConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 32;
  c.block_size = 16;
  c.vocab_size = 61;
  c.padded_vocab_size = 64;
  return c;
}

// Grouped-query (4 query heads over 2 kv heads), an odd SwiGLU width, a non-default theta.
nn::LlamaConfig llama_config() {
  nn::LlamaConfig c;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.n_embd = 32;
  c.intermediate_size = 72;
  c.block_size = 16;
  c.vocab_size = 61;
  c.padded_vocab_size = 64;
  c.rope_theta = 500.0;
  return c;
}

// A model of either architecture with its config's flags for check_gpt_torch.py.
struct Checked {
  std::unique_ptr<nn::CausalLM> model;
  std::string flags;
  int64_t vocab, padded;
};

Checked make_model(const std::string& arch) {
  std::ostringstream f;
  if (arch == "llama") {
    const nn::LlamaConfig c = llama_config();
    f << "--arch llama --n-layer " << c.n_layer << " --n-head " << c.n_head << " --n-kv-head " << c.n_kv_head
      << " --n-embd " << c.n_embd << " --intermediate " << c.intermediate_size << " --rope-theta "
      << c.rope_theta << " --norm-eps " << c.norm_eps << " --vocab " << c.vocab_size << " --padded "
      << c.padded_vocab_size << " --block " << c.block_size;
    return {std::make_unique<nn::Llama>(c), f.str(), c.vocab_size, c.padded_vocab_size};
  }
  const nn::GPTConfig c = gpt_config();
  f << "--n-layer " << c.n_layer << " --n-head " << c.n_head << " --n-embd " << c.n_embd << " --vocab "
    << c.vocab_size << " --padded " << c.padded_vocab_size << " --block " << c.block_size;
  return {std::make_unique<nn::GPT>(c), f.str(), c.vocab_size, c.padded_vocab_size};
}

// Runs the check for a model of `arch` in `dt` on `dev`; returns the script's exit status and output.
std::pair<int, std::string> check_against_torch(const std::string& arch, DType dt, Device dev, double rtol) {
  manual_seed(77);
  Checked m = make_model(arch);
  nn::CausalLM& model = *m.model;
  // GPT-2's init is small (std 0.02): larger norm affines and weights make attention and
  // the norms far from trivial, so a wrong formula cannot hide.
  {
    NoGradGuard no_grad;
    for (auto& [name, p] : model.named_parameters()) {
      const bool norm = p.dim() == 1;  // LayerNorm / RMSNorm affines
      Tensor noise = randn(p.sizes(), p.dtype()) * (norm ? 0.2 : 0.3);
      p.copy_(norm && name.find("weight") != std::string::npos ? noise + 1.0 : noise);
      // The padded vocabulary rows (embeddings, an untied head) stay zero, as the models keep them.
      if (p.dim() == 2 && p.sizes()[0] == m.padded) p.narrow(0, m.vocab, m.padded - m.vocab).zero_();
    }
  }
  model.to(dt);
  model.to(dev);
  const int64_t T = model.block_size();
  Tensor idx = randint(0, m.vocab, {2, T}, DType::i64);
  Tensor targets = randint(0, m.vocab, {2, T}, DType::i64);
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
  const fs::path dir = fs::temp_directory_path() / ("ember_" + arch + "_torch_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const fs::path file = dir / "model.safetensors", log = dir / "check.log";
  io::save_safetensors(out, file.string());

  std::ostringstream cmd;
  cmd << python_with_torch() << " '" << EMBER_TEST_DATA_DIR << "/check_gpt_torch.py' '" << file.string() << "' "
      << m.flags << " --device " << (dev.is_cuda() ? "cuda" : "cpu") << " --rtol " << rtol << " >'"
      << log.string() << "' 2>&1";
  const int raw = std::system(cmd.str().c_str());
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  fs::remove_all(dir);
  return {WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, cmd.str() + "\n" + text.str()};
}

}  // namespace

class CausalLMTorch : public ::testing::TestWithParam<std::string> {};

TEST_P(CausalLMTorch, EmberWeightsGiveTorchsLogitsLossAndGradients) {
  if (python_with_torch().empty()) GTEST_SKIP() << "no python3 with torch (Debian: python3-torch)";
  {
    auto [status, output] = check_against_torch(GetParam(), DType::f64, Device::cpu(), 1e-10);
    EXPECT_EQ(status, 0) << output;
    std::printf("%s", output.substr(output.rfind("torch ")).c_str());
  }
  {
    auto [status, output] = check_against_torch(GetParam(), DType::f32, Device::cpu(), 2e-5);
    EXPECT_EQ(status, 0) << output;
    std::printf("%s", output.substr(output.rfind("torch ")).c_str());
  }
}

TEST_P(CausalLMTorch, OnCudaInF32) {
  EMBER_SKIP_WITHOUT_CUDA();
  if (python_with_torch().empty()) GTEST_SKIP() << "no python3 with torch";
  cuda::AllowTF32Guard exact_f32(false);
  auto [status, output] = check_against_torch(GetParam(), DType::f32, Device::cuda(), 1e-4);
  if (status == 77) GTEST_SKIP() << "torch sees no GPU: " << output;
  EXPECT_EQ(status, 0) << output;
}

INSTANTIATE_TEST_SUITE_P(Arch, CausalLMTorch, ::testing::Values("gpt", "llama"),
                         [](const auto& info) { return info.param; });
