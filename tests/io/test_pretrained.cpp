// Hugging Face GPT-2 folders: tests/fixtures/make_hf_gpt2.py writes a tiny random GPT-2 in
// HF's layout (an independent PyTorch GPT2LMHeadModel, the files laid out byte for byte as
// transformers + safetensors write them) and its float64 logits and loss; ember must load it
// (both key styles, F32/F16/BF16), reproduce the logits and loss, write back the same bytes,
// and refuse every file or config that does not fit, naming the tensor or field.
#include <ember/io.h>

#include <unistd.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <set>
#include <sstream>

#include "support/test_support.h"

namespace ember {
namespace {

namespace fs = std::filesystem;

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}
void write_all(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << bytes;
}

::testing::AssertionResult contains(const std::string& s, const std::string& sub) {
  if (s.find(sub) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << sub << "\" is not in \"" << s << "\"";
}

// The top-level keys of a config.json as transformers (and ember) indent it: `  "key": ...`.
std::set<std::string> config_keys(const std::string& text) {
  std::set<std::string> keys;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("  \"", 0) == 0 && line.size() > 3 && line[2] == '"') {
      size_t end = line.find('"', 3);
      if (end != std::string::npos && line.compare(end, 2, "\":") == 0) keys.insert(line.substr(3, end - 3));
    }
  return keys;
}

// Every tensor of two state dicts equal, bit for bit (after converting a to b's dtype).
::testing::AssertionResult same_state(const StateDict& a, const StateDict& b) {
  if (a.keys() != b.keys()) return ::testing::AssertionFailure() << "different keys";
  for (const auto& [name, t] : a) {
    const Tensor& u = b.at(name);
    if (t.sizes() != u.sizes()) return ::testing::AssertionFailure() << name << ": shapes differ";
    if (!t.to(Device::cpu(), u.dtype()).allclose(u.to(Device::cpu()), 0.0, 0.0))
      return ::testing::AssertionFailure() << name << " differs";
  }
  return ::testing::AssertionSuccess();
}

class Pretrained : public ::testing::Test {
 protected:
  // One python run for the suite (importing torch takes about a second): both folders and
  // the reference.
  static void SetUpTestSuite() {
    std::string tmpl = (fs::temp_directory_path() / "ember-hf-gpt2-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) {
      error_ = "mkdtemp failed";
      return;
    }
    root_ = tmpl;
    const std::string script = std::string(EMBER_TEST_DATA_DIR) + "/make_hf_gpt2.py";
    const std::string log = root_ + "/log.txt";
    // $EMBER_PYTHON, python3, Debian's /usr/bin/python3: the first that has torch (the
    // script exits 77 without it).
    std::vector<std::string> pythons;
    if (const char* e = std::getenv("EMBER_PYTHON")) pythons.push_back(e);
    pythons.push_back("python3");
    pythons.push_back("/usr/bin/python3");
    skip_ = "no python3 with torch and numpy (Debian: python3-torch)";
    for (const auto& py : pythons) {
      const std::string cmd = py + " '" + script + "' '" + root_ + "' >'" + log + "' 2>&1";
      const int raw = std::system(cmd.c_str());
      const int status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
      if (status == 77) continue;
      skip_.clear();
      if (status != 0) error_ = cmd + " failed (" + std::to_string(status) + "):\n" + read_all(log);
      return;
    }
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    if (!root_.empty()) fs::remove_all(root_, ec);
  }
  void SetUp() override {
    ASSERT_TRUE(error_.empty()) << error_;
    if (!skip_.empty()) GTEST_SKIP() << skip_;
  }

  static std::string hf() { return root_ + "/transformers"; }
  static std::string hub() { return root_ + "/hub"; }
  // A fresh folder under the suite's temporary root.
  static std::string fresh(const std::string& name) {
    const std::string dir = root_ + "/" + name;
    fs::remove_all(dir);
    fs::create_directories(dir);
    return dir;
  }
  // A copy of the transformers folder with its config text edited (from -> to, which must
  // occur) and its tensors passed through `edit`.
  template <class Edit>
  static std::string variant(const std::string& name, const std::string& from, const std::string& to,
                             Edit&& edit) {
    const std::string dir = fresh(name);
    std::string config = read_all(hf() + "/config.json");
    if (!from.empty()) {
      const size_t at = config.find(from);
      EXPECT_NE(at, std::string::npos) << from;
      if (at != std::string::npos) config.replace(at, from.size(), to);
    }
    write_all(dir + "/config.json", config);
    StateDict tensors = io::load_safetensors(hf() + "/model.safetensors");
    edit(tensors);
    io::save_safetensors(tensors, dir + "/model.safetensors", {{"format", "pt"}});
    return dir;
  }
  static std::string config_variant(const std::string& name, const std::string& from, const std::string& to) {
    return variant(name, from, to, [](StateDict&) {});
  }
  static std::string tensor_variant(const std::string& name, const std::function<void(StateDict&)>& edit) {
    return variant(name, "", "", edit);
  }

  static inline std::string root_, skip_, error_;
};

StateDict without(const StateDict& s, const std::string& drop) {
  StateDict out;
  for (const auto& [name, t] : s)
    if (name != drop) out.insert(name, t);
  return out;
}

TEST_F(Pretrained, TransformersFolderGivesTorchsLogitsAndLoss) {
  const auto before = default_generator().get_state();
  auto model = io::gpt2_from_pretrained(hf());
  const auto after = default_generator().get_state();
  EXPECT_EQ(before.seed, after.seed);
  EXPECT_EQ(before.offset, after.offset) << "loading drew from the default generator";

  const nn::GPTConfig& c = model->config;
  EXPECT_EQ(c.n_layer, 2);
  EXPECT_EQ(c.n_head, 2);
  EXPECT_EQ(c.n_embd, 32);
  EXPECT_EQ(c.block_size, 16);
  EXPECT_EQ(c.vocab_size, 61);
  EXPECT_EQ(c.padded_vocab_size, 64);
  EXPECT_EQ(c.dropout, 0.0f);

  const StateDict ref = io::load_safetensors(root_ + "/reference.safetensors");
  const Tensor& idx = ref.at("idx");
  const Tensor& ref_logits = ref.at("logits");
  model->eval();
  NoGradGuard no_grad;
  Tensor logits = model->forward(idx);
  ASSERT_EQ(logits.sizes(), (Shape{2, 16, 64}));
  const double scale = ref_logits.abs().max().item<double>();
  EXPECT_GT(scale, 1.0);
  EXPECT_TRUE(test::all_close(logits.narrow(2, 0, 61).to(DType::f64), ref_logits, 1e-5, 1e-5 * scale));
  const double loss = model->forward(idx, ref.at("targets")).item<double>();
  EXPECT_NEAR(loss, ref.at("loss").item<double>(), 1e-5 * ref.at("loss").item<double>());

  // The padding rows are zero; the real rows are the file's wte.
  const Tensor& wte = model->wte.weight;
  EXPECT_TRUE(test::all_close(wte.narrow(0, 61, 3), Shape{3, 32}, std::vector<double>(96, 0.0), 0, 0));
  const StateDict file = io::load_safetensors(hf() + "/model.safetensors");
  EXPECT_TRUE(wte.narrow(0, 0, 61).allclose(file.at("transformer.wte.weight"), 0.0, 0.0));
}

TEST_F(Pretrained, HubFolderLoadsTheSameModel) {
  // No prefix, with the attn.bias / attn.masked_bias buffers of older transformers.
  const auto names = io::load_safetensors(hub() + "/model.safetensors").keys();
  ASSERT_NE(std::find(names.begin(), names.end(), "h.1.attn.bias"), names.end());
  ASSERT_NE(std::find(names.begin(), names.end(), "h.1.attn.masked_bias"), names.end());
  EXPECT_TRUE(same_state(io::gpt2_from_pretrained(hub())->state_dict(),
                         io::gpt2_from_pretrained(hf())->state_dict()));
}

TEST_F(Pretrained, SavePretrainedWritesTransformersBytes) {
  const std::string expected = read_all(hf() + "/model.safetensors");
  ASSERT_GT(expected.size(), 100000u);
  for (const std::string& source : {hf(), hub()}) {
    auto model = io::gpt2_from_pretrained(source);
    const std::string out = fresh("saved") + "/nested/out";  // folders are created
    io::save_pretrained(*model, out);
    EXPECT_TRUE(read_all(out + "/model.safetensors") == expected) << "from " << source;
    // The config has the keys transformers writes, and the folder loads back.
    const std::string config = read_all(out + "/config.json");
    const auto ours = config_keys(config);
    for (const auto& key : config_keys(read_all(hf() + "/config.json"))) {
      if (key == "transformers_version") continue;
      EXPECT_TRUE(ours.count(key)) << key << " missing in\n" << config;
    }
    EXPECT_TRUE(contains(config, "\"tie_word_embeddings\": true"));
    EXPECT_TRUE(contains(config, "\"layer_norm_epsilon\": 1e-05"));
    auto back = io::gpt2_from_pretrained(out);
    EXPECT_EQ(back->config.padded_vocab_size, 64);
    EXPECT_TRUE(same_state(back->state_dict(), model->state_dict()));
  }
}

TEST_F(Pretrained, HalfPrecisionFilesLoadIntoF32) {
  const StateDict f32 = io::gpt2_from_pretrained(hf())->state_dict();
  for (DType dt : {DType::bf16, DType::f16}) {
    const std::string dir = tensor_variant(str("half-", dt), [dt](StateDict& s) {
      StateDict half;
      for (const auto& [name, t] : s) half.insert(name, t.to(dt));
      s = half;
    });
    auto model = io::gpt2_from_pretrained(dir);
    StateDict expected;
    for (const auto& [name, t] : f32) expected.insert(name, t.to(dt).to(DType::f32));
    const StateDict got = model->state_dict();
    EXPECT_EQ(got.at("wte.weight").dtype(), DType::f32);
    EXPECT_TRUE(same_state(got, expected)) << str(dt);
  }
}

TEST_F(Pretrained, TiedLmHeadIsAcceptedUntiedIsNot) {
  const std::string tied = tensor_variant("tied", [](StateDict& s) {
    s.insert("lm_head.weight", s.at("transformer.wte.weight").clone());
  });
  EXPECT_TRUE(same_state(io::gpt2_from_pretrained(tied)->state_dict(),
                         io::gpt2_from_pretrained(hf())->state_dict()));
  const std::string untied = tensor_variant("untied", [](StateDict& s) {
    s.insert("lm_head.weight", s.at("transformer.wte.weight") * 2.0);
  });
  const std::string msg = test::message_of<ValueError>([&] { io::gpt2_from_pretrained(untied); });
  EXPECT_TRUE(contains(msg, "[gpt2_from_pretrained] " + untied + "/model.safetensors"));
  EXPECT_TRUE(contains(msg, "lm_head.weight"));
}

TEST_F(Pretrained, TensorsThatDoNotFitAreNamed) {
  {
    const std::string dir = tensor_variant("missing", [](StateDict& s) {
      s = without(s, "transformer.h.1.mlp.c_fc.bias");
    });
    const std::string msg = test::message_of<ValueError>([&] { io::gpt2_from_pretrained(dir); });
    EXPECT_TRUE(contains(msg, "[gpt2_from_pretrained] " + dir + "/model.safetensors"));
    EXPECT_TRUE(contains(msg, "'h.1.mlp.c_fc.bias'"));
    EXPECT_TRUE(contains(msg, "is missing"));
  }
  {
    // ember's own [out, in] layout is not HF's.
    const std::string dir = tensor_variant("transposed", [](StateDict& s) {
      s.set("transformer.h.0.attn.c_attn.weight", s.at("transformer.h.0.attn.c_attn.weight").t().contiguous());
    });
    const std::string msg = test::message_of<ShapeError>([&] { io::gpt2_from_pretrained(dir); });
    EXPECT_TRUE(contains(msg, "[gpt2_from_pretrained] " + dir + "/model.safetensors"));
    EXPECT_TRUE(contains(msg, "'transformer.h.0.attn.c_attn.weight' has shape [96, 32]"));
    EXPECT_TRUE(contains(msg, "needs [32, 96]"));
  }
  {
    const std::string dir = tensor_variant("unexpected", [](StateDict& s) {
      s.insert("transformer.h.2.ln_1.weight", s.at("transformer.h.1.ln_1.weight").clone());
    });
    const std::string msg = test::message_of<ValueError>([&] { io::gpt2_from_pretrained(dir); });
    EXPECT_TRUE(contains(msg, "unexpected tensor 'transformer.h.2.ln_1.weight'"));
  }
  {
    // Both key styles for one tensor.
    const std::string dir = tensor_variant("twice", [](StateDict& s) {
      s.insert("ln_f.bias", s.at("transformer.ln_f.bias").clone());
    });
    const std::string msg = test::message_of<ValueError>([&] { io::gpt2_from_pretrained(dir); });
    EXPECT_TRUE(contains(msg, "'ln_f.bias'"));
    EXPECT_TRUE(contains(msg, "'transformer.ln_f.bias'"));
  }
  {
    const std::string dir = tensor_variant("ints", [](StateDict& s) {
      s.set("transformer.ln_f.bias", s.at("transformer.ln_f.bias").to(DType::i64));
    });
    const std::string msg = test::message_of<DTypeError>([&] { io::gpt2_from_pretrained(dir); });
    EXPECT_TRUE(contains(msg, "'transformer.ln_f.bias' has dtype"));
  }
  {
    // A config that does not describe the file: wte is the first tensor that does not fit.
    const std::string dir = config_variant("vocab", "\"vocab_size\": 61", "\"vocab_size\": 60");
    const std::string msg = test::message_of<ShapeError>([&] { io::gpt2_from_pretrained(dir); });
    EXPECT_TRUE(contains(msg, "'transformer.wte.weight' has shape [61, 32]"));
    EXPECT_TRUE(contains(msg, "needs [60, 32]"));
  }
  {
    // An absurd size is named against the file before the model is built (it once asked for a
    // 64 TB host allocation first).
    const std::string dir = config_variant("positions", "\"n_positions\": 16", "\"n_positions\": 1000000000000");
    const std::string msg = test::message_of<ShapeError>([&] { io::gpt2_from_pretrained(dir); });
    EXPECT_TRUE(contains(msg, "'transformer.wpe.weight' has shape [16, 32]")) << msg;
    EXPECT_TRUE(contains(msg, "n_positions 1000000000000")) << msg;
    const std::string layers = config_variant("layers", "\"n_layer\": 2", "\"n_layer\": 1000000000");
    const std::string lmsg = test::message_of<ValueError>([&] { io::gpt2_from_pretrained(layers); });
    EXPECT_TRUE(contains(lmsg, "config.json: \"n_layer\" is 1000000000 but")) << lmsg;
    EXPECT_TRUE(contains(lmsg, "holds 2 layers")) << lmsg;
  }
}

TEST_F(Pretrained, ConfigFieldsEmberCannotHonourAreNamed) {
  struct Case {
    const char* from;
    const char* to;
    const char* field;
  };
  const Case cases[] = {
      {"\"layer_norm_epsilon\": 1e-05", "\"layer_norm_epsilon\": 1e-06", "\"layer_norm_epsilon\""},
      {"\"activation_function\": \"gelu_new\"", "\"activation_function\": \"relu\"", "\"activation_function\""},
      {"\"scale_attn_by_inverse_layer_idx\": false", "\"scale_attn_by_inverse_layer_idx\": true",
       "\"scale_attn_by_inverse_layer_idx\""},
      {"\"reorder_and_upcast_attn\": false", "\"reorder_and_upcast_attn\": true", "\"reorder_and_upcast_attn\""},
      {"\"scale_attn_weights\": true", "\"scale_attn_weights\": false", "\"scale_attn_weights\""},
      {"\"n_inner\": null", "\"n_inner\": 64", "\"n_inner\""},
      {"\"model_type\": \"gpt2\"", "\"model_type\": \"llama\"", "\"model_type\""},
      {"\"use_cache\": true", "\"use_cache\": true, \"tie_word_embeddings\": false", "\"tie_word_embeddings\""},
      {"\"n_head\": 2", "\"n_head\": 3", "\"n_embd\""},
      {"\"n_layer\": 2", "\"n_layer\": 0", "\"n_layer\""},
      {"\"n_positions\": 16", "\"n_positions\": \"16\"", "\"n_positions\""},
  };
  for (const Case& k : cases) {
    const std::string dir = config_variant("config", k.from, k.to);
    const std::string msg = test::message_of<ValueError>([&] { io::gpt2_from_pretrained(dir); });
    EXPECT_TRUE(contains(msg, "[gpt2_from_pretrained] " + dir + "/config.json: " + k.field)) << k.to;
  }
  // The same tanh-GELU under its other name is accepted.
  const std::string tanh =
      config_variant("tanh", "\"activation_function\": \"gelu_new\"", "\"activation_function\": \"gelu_pytorch_tanh\"");
  EXPECT_NO_THROW(io::gpt2_from_pretrained(tanh));
  // n_ctx, the older name of n_positions, stands in for it.
  const std::string ctx = config_variant("ctx", "\"n_positions\": 16,", "");
  EXPECT_EQ(io::gpt2_from_pretrained(ctx)->config.block_size, 16);
  const std::string neither = config_variant("neither", "\"n_ctx\": 16,", "");
  write_all(neither + "/config.json", [&] {
    std::string text = read_all(neither + "/config.json");
    text.replace(text.find("\"n_positions\": 16,"), 18, "");
    return text;
  }());
  EXPECT_TRUE(contains(test::message_of<ValueError>([&] { io::gpt2_from_pretrained(neither); }),
                       "config.json: \"n_positions\" is missing"));
  // The dropout is the caller's, not the file's *_pdrop (0.1 here).
  EXPECT_EQ(io::gpt2_from_pretrained(hf(), Device::cpu(), 0.25)->config.dropout, 0.25f);
}

TEST_F(Pretrained, MissingFilesAreIOErrors) {
  const std::string empty = fresh("empty");
  EXPECT_TRUE(contains(test::message_of<IOError>([&] { io::gpt2_from_pretrained(empty); }),
                       "[gpt2_from_pretrained] " + empty + "/config.json"));
  const std::string no_weights = fresh("no-weights");
  fs::copy_file(hf() + "/config.json", no_weights + "/config.json");
  EXPECT_TRUE(contains(test::message_of<IOError>([&] { io::gpt2_from_pretrained(no_weights); }),
                       "[gpt2_from_pretrained] " + no_weights + "/model.safetensors"));
  const std::string bad_json = config_variant("bad-json", "{", "{,");
  EXPECT_TRUE(contains(test::message_of<IOError>([&] { io::gpt2_from_pretrained(bad_json); }),
                       "config.json: not valid JSON"));
}

TEST_F(Pretrained, OnCudaMatchesCpuAndSavesTheSameBytes) {
  EMBER_SKIP_WITHOUT_CUDA();
  auto cpu = io::gpt2_from_pretrained(hf());
  auto gpu = io::gpt2_from_pretrained(hf(), Device::cuda());
  EXPECT_TRUE(gpu->wte.weight.device().is_cuda());
  EXPECT_TRUE(same_state(gpu->state_dict(), cpu->state_dict()));
  const std::string out = fresh("from-cuda");
  io::save_pretrained(*gpu, out);
  EXPECT_TRUE(read_all(out + "/model.safetensors") == read_all(hf() + "/model.safetensors"));
}

}  // namespace
}  // namespace ember
