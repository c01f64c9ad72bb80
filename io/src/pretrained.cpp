// Hugging Face GPT-2 folders in and out of nn::GPT; the mapping and invariants are in
// ember/io/pretrained.h.
//
// Loading checks everything before it trusts anything: the config is validated field by field
// against the one architecture nn::GPT implements, then every ember parameter is matched to
// exactly one tensor of the file (shape checked in HF's layout, so the message shows the
// shape the file should have had), and only a file that fits completely is copied in.
#include "ember/io/pretrained.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "ember/error.h"
#include "ember/grad_mode.h"
#include "ember/nn/init.h"
#include "ember/io/safetensors.h"
#include "ember/random.h"
#include "ember/tensor.h"
#include "file_util.h"
#include "safetensors_detail.h"

namespace ember::io {

using detail::join_path;

namespace {

using Json = nlohmann::json;  // std::map keys: dump() sorts them, as transformers' to_json_string

constexpr std::string_view kLoad = "[gpt2_from_pretrained]";
constexpr std::string_view kSave = "[save_pretrained]";
constexpr std::string_view kPrefix = "transformer.";
// llm.c pads GPT-2's vocabulary to a multiple of 64 for GEMM-friendly shapes (50257 -> 50304).
constexpr int64_t kVocabMultiple = 64;
constexpr double kLayerNormEps = 1e-5;

// HF's Conv1D layers, whose weights are stored [in, out].
bool is_conv1d_weight(std::string_view name) {
  return name.starts_with("h.") &&
         (name.ends_with(".attn.c_attn.weight") || name.ends_with(".attn.c_proj.weight") ||
          name.ends_with(".mlp.c_fc.weight") || name.ends_with(".mlp.c_proj.weight"));
}

// h.<digits>.attn.bias / h.<digits>.attn.masked_bias: the causal-mask buffers older transformers
// saved (ember's attention is causal by construction).
bool is_mask_buffer(std::string_view name) {
  if (!name.starts_with("h.")) return false;
  std::string_view rest = name.substr(2);
  size_t digits = 0;
  while (digits < rest.size() && rest[digits] >= '0' && rest[digits] <= '9') ++digits;
  if (digits == 0) return false;
  rest = rest.substr(digits);
  return rest == ".attn.bias" || rest == ".attn.masked_bias";
}

// ---- config.json ----

std::string read_text(const std::string& path, std::string_view op) {
  detail::File f = detail::File::open_read(path, std::string(op));
  std::string text(f.size(), '\0');
  if (!text.empty()) f.read_at(text.data(), text.size(), 0);
  return text;
}

[[noreturn]] void bad_field(const std::string& file, std::string_view field, const std::string& what) {
  throw ValueError(str(kLoad, " ", file, ": \"", field, "\" ", what));
}

const Json* find_field(const Json& cfg, std::string_view name) {
  auto it = cfg.find(std::string(name));
  return it == cfg.end() ? nullptr : &*it;
}

int64_t positive_int(const Json& cfg, const std::string& file, std::string_view name) {
  const Json* v = find_field(cfg, name);
  if (!v) bad_field(file, name, "is missing");
  if (!v->is_number_integer() || v->get<int64_t>() < 1)
    bad_field(file, name, str("must be a positive integer, got ", v->dump()));
  return v->get<int64_t>();
}

// A field whose value must be `want` for nn::GPT's architecture (absent: transformers' default,
// which is the same).
void require_bool(const Json& cfg, const std::string& file, std::string_view name, bool want,
                  std::string_view why) {
  const Json* v = find_field(cfg, name);
  if (!v) return;
  if (!v->is_boolean()) bad_field(file, name, str("must be true or false, got ", v->dump()));
  if (v->get<bool>() != want)
    bad_field(file, name, str("is ", v->dump(), " but ember's GPT-2 ", why, " (", want ? "true" : "false",
                              " only)"));
}

nn::GPTConfig read_config(const std::string& file) {
  const std::string text = read_text(file, kLoad);
  Json cfg;
  try {
    cfg = Json::parse(text);
  } catch (const Json::exception& e) {
    throw IOError(str(kLoad, " ", file, ": not valid JSON (", e.what(), ")"));
  }
  if (!cfg.is_object()) throw IOError(str(kLoad, " ", file, ": not a JSON object"));

  if (const Json* v = find_field(cfg, "model_type"); v && *v != "gpt2")
    bad_field(file, "model_type", str("is ", v->dump(), ", not \"gpt2\""));
  if (const Json* v = find_field(cfg, "activation_function")) {
    // gelu_pytorch_tanh is the same tanh approximation computed by torch's own kernel.
    if (!v->is_string() || (*v != "gelu_new" && *v != "gelu_pytorch_tanh"))
      bad_field(file, "activation_function",
                str("is ", v->dump(), " but ember's GPT-2 MLP uses gelu_new (the tanh approximation)"));
  }
  if (const Json* v = find_field(cfg, "layer_norm_epsilon")) {
    if (!v->is_number() || std::abs(v->get<double>() - kLayerNormEps) > 1e-12)
      bad_field(file, "layer_norm_epsilon", str("is ", v->dump(), " but ember's GPT-2 LayerNorms use 1e-05"));
  }
  if (const Json* v = find_field(cfg, "n_inner"); v && !v->is_null()) {
    const Json* e = find_field(cfg, "n_embd");
    if (!v->is_number_integer() || !e || !e->is_number_integer() ||
        v->get<int64_t>() != 4 * e->get<int64_t>())
      bad_field(file, "n_inner", str("is ", v->dump(), " but ember's GPT-2 MLP is 4 * n_embd wide"));
  }
  require_bool(cfg, file, "scale_attn_weights", true, "attention always scales by 1/sqrt(head size)");
  require_bool(cfg, file, "scale_attn_by_inverse_layer_idx", false,
               "attention does not scale by the layer index");
  require_bool(cfg, file, "reorder_and_upcast_attn", false, "attention has no reordered upcast");
  require_bool(cfg, file, "tie_word_embeddings", true, "lm_head is tied to wte");
  require_bool(cfg, file, "add_cross_attention", false, "blocks have no cross-attention");

  nn::GPTConfig c;
  c.n_layer = positive_int(cfg, file, "n_layer");
  c.n_head = positive_int(cfg, file, "n_head");
  c.n_embd = positive_int(cfg, file, "n_embd");
  // n_ctx is the older name (GPT-2's original hparams.json, early transformers).
  c.block_size = positive_int(cfg, file, find_field(cfg, "n_ctx") && !find_field(cfg, "n_positions")
                                              ? "n_ctx"
                                              : "n_positions");
  c.vocab_size = positive_int(cfg, file, "vocab_size");
  if (c.n_embd % c.n_head != 0)
    bad_field(file, "n_embd", str("is ", c.n_embd, ", not a multiple of n_head ", c.n_head));
  c.padded_vocab_size = (c.vocab_size + kVocabMultiple - 1) / kVocabMultiple * kVocabMultiple;
  return c;
}

Json config_json(const nn::GPTConfig& c) {
  // GPT2Config's keys, as transformers' to_json_string writes them. The dropout ember applies
  // is on the embeddings and the residual branches; its fused attention has none on the
  // attention weights.
  const double p = c.dropout;
  Json j = {
      {"activation_function", "gelu_new"},
      {"architectures", Json::array({"GPT2LMHeadModel"})},
      {"attn_pdrop", 0.0},
      {"bos_token_id", 50256},
      {"embd_pdrop", p},
      {"eos_token_id", 50256},
      {"initializer_range", 0.02},
      {"layer_norm_epsilon", kLayerNormEps},
      {"model_type", "gpt2"},
      {"n_ctx", c.block_size},
      {"n_embd", c.n_embd},
      {"n_head", c.n_head},
      {"n_inner", nullptr},
      {"n_layer", c.n_layer},
      {"n_positions", c.block_size},
      {"reorder_and_upcast_attn", false},
      {"resid_pdrop", p},
      {"scale_attn_by_inverse_layer_idx", false},
      {"scale_attn_weights", true},
      {"summary_activation", nullptr},
      {"summary_first_dropout", 0.1},
      {"summary_proj_to_labels", true},
      {"summary_type", "cls_index"},
      {"summary_use_proj", true},
      {"tie_word_embeddings", true},
      {"torch_dtype", "float32"},
      {"use_cache", true},
      {"vocab_size", c.vocab_size},
  };
  return j;
}

// The shape `name` has in an HF file for ember parameter `p`.
Shape hf_shape(const std::string& name, const Tensor& p, const nn::GPTConfig& c) {
  if (name == "wte.weight") return Shape{c.vocab_size, c.n_embd};
  Shape s = p.sizes();
  if (is_conv1d_weight(name)) std::swap(s[0], s[1]);
  return s;
}

}  // namespace

std::unique_ptr<nn::GPT> gpt2_from_pretrained(const std::string& dir, Device device, double dropout) {
  const std::string config_file = join_path(dir, "config.json");
  const std::string weights_file = join_path(dir, "model.safetensors");
  nn::GPTConfig c = read_config(config_file);
  c.dropout = float(dropout);
  SafetensorsFile file = detail::read_safetensors(weights_file, Device::cpu(), kLoad);
  const auto throw_misfit = [&](const std::string& file_name, const Shape& have, const Shape& want) {
    throw ShapeError(str(kLoad, " ", weights_file, ": tensor '", file_name, "' has shape ", have,
                         " but the config (n_layer ", c.n_layer, ", n_head ", c.n_head, ", n_embd ", c.n_embd,
                         ", n_positions ", c.block_size, ", vocab_size ", c.vocab_size, ") needs ", want));
  };
  // The embeddings and the layer count against the config before the model is built: a config
  // claiming n_positions 10^12 (or 10^9 layers) would otherwise first ask for terabytes.
  int64_t layers_in_file = 0;
  for (const auto& [name, t] : file.tensors) {
    const std::string key = name.starts_with(kPrefix) ? name.substr(kPrefix.size()) : name;
    int64_t layer = 0;  // "h.<layer>.": a name that is not a small number is left to the matching below
    const char* digits = key.c_str() + 2;
    if (key.starts_with("h.") && std::from_chars(digits, key.c_str() + key.size(), layer).ec == std::errc() &&
        layer >= 0 && layer < (int64_t(1) << 31))
      layers_in_file = std::max(layers_in_file, layer + 1);
    if (key == "wte.weight" && t.sizes() != Shape{c.vocab_size, c.n_embd})
      throw_misfit(name, t.sizes(), Shape{c.vocab_size, c.n_embd});
    if (key == "wpe.weight" && t.sizes() != Shape{c.block_size, c.n_embd})
      throw_misfit(name, t.sizes(), Shape{c.block_size, c.n_embd});
  }
  if (c.n_layer > layers_in_file)
    bad_field(config_file, "n_layer", str("is ", c.n_layer, " but ", weights_file, " holds ", layers_in_file, " layers"));

  // Every parameter is overwritten below: construct without the random init (faster, and the
  // user's random stream does not move).
  std::unique_ptr<nn::GPT> model;
  {
    nn::init::SkipInitGuard skip_init;
    model = std::make_unique<nn::GPT>(c);
  }
  const StateDict params = model->state_dict();  // detached handles sharing the parameters' storage

  // The file's tensors under ember's names; those that are no parameter of the model.
  struct Source {
    std::string file_name;
    Tensor tensor;
  };
  std::unordered_map<std::string, Source> sources;
  std::vector<std::string> unexpected;  // file names, in file order
  const Tensor* lm_head = nullptr;
  for (const auto& [name, t] : file.tensors) {
    std::string key = name.starts_with(kPrefix) ? name.substr(kPrefix.size()) : name;
    if (is_mask_buffer(key)) continue;
    if (key == "lm_head.weight") {
      lm_head = &t;
      continue;
    }
    if (!params.contains(key)) {
      unexpected.push_back(name);
      continue;
    }
    auto [it, fresh] = sources.try_emplace(key, Source{name, t});
    if (!fresh)
      throw ValueError(str(kLoad, " ", weights_file, ": tensors '", it->second.file_name, "' and '",
                           name, "' both hold ", key));
  }

  // Match every parameter first, so a file that does not fit leaves nothing half-loaded.
  struct Copy {
    Tensor param;
    const Tensor* src;
    bool transpose;  // an HF Conv1D weight, [in, out]
    bool padded;     // wte: the file's vocab_size rows, then ember's zero padding
  };
  std::vector<Copy> plan;
  for (const auto& [name, p] : params) {
    auto it = sources.find(name);
    if (it == sources.end()) {
      throw ValueError(str(kLoad, " ", weights_file, ": tensor '", name, "' (or 'transformer.", name,
                           "') is missing; the config describes ", c.n_layer, " layers of width ",
                           c.n_embd,
                           unexpected.empty() ? std::string()
                                              : str(" (the file has '", unexpected[0],
                                                    "', which is no GPT-2 parameter)")));
    }
    const Source& src = it->second;
    const Shape want = hf_shape(name, p, c);
    if (src.tensor.sizes() != want) throw_misfit(src.file_name, src.tensor.sizes(), want);
    if (!is_floating(src.tensor.dtype()))
      throw DTypeError(str(kLoad, " ", weights_file, ": tensor '", src.file_name, "' has dtype ",
                           src.tensor.dtype(), "; weights must be F32, F16, BF16 or F64"));
    plan.push_back({p, &src.tensor, is_conv1d_weight(name), name == "wte.weight"});
  }
  if (!unexpected.empty())
    throw ValueError(str(kLoad, " ", weights_file, ": unexpected tensor '", unexpected[0],
                         "' (not a parameter of a GPT-2 with ", c.n_layer, " layers; ", unexpected.size(),
                         " such tensors)"));
  if (lm_head) {
    const Tensor& wte = sources.at("wte.weight").tensor;
    if (lm_head->sizes() != wte.sizes() || !is_floating(lm_head->dtype()) ||
        !lm_head->to(DType::f32).allclose(wte.to(DType::f32), 0.0, 0.0))
      throw ValueError(str(kLoad, " ", weights_file,
                           ": lm_head.weight differs from wte.weight; ember's GPT-2 ties them"));
  }

  NoGradGuard no_grad;
  for (const Copy& copy : plan) {
    Tensor p = copy.param;
    const Tensor src = copy.transpose ? copy.src->t() : *copy.src;
    if (copy.padded) {
      p.narrow(0, 0, c.vocab_size).copy_(src);
      p.narrow(0, c.vocab_size, c.padded_vocab_size - c.vocab_size).zero_();
    } else {
      p.copy_(src);  // converts F16 / BF16 / F64 to f32
    }
  }
  if (device != Device::cpu()) model->to(device);
  return model;
}

void save_pretrained(const nn::GPT& model, const std::string& dir) {
  const nn::GPTConfig& c = model.config;
  std::vector<std::pair<std::string, Tensor>> tensors;
  {
    NoGradGuard no_grad;
    for (const auto& [name, t] : model.state_dict()) {
      Tensor h = t.detach().to(Device::cpu(), DType::f32);
      if (name == "wte.weight") h = h.narrow(0, 0, c.vocab_size);
      if (is_conv1d_weight(name)) h = h.t();
      tensors.emplace_back(std::string(kPrefix) + name, h.contiguous());
    }
  }
  // The safetensors library lays tensors out by dtype (descending), then by name: with one
  // dtype, by name. ember's writer keeps StateDict order, so sorting here gives its bytes.
  std::sort(tensors.begin(), tensors.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  StateDict state;
  for (auto& [name, t] : tensors) state.insert(name, std::move(t));

  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw IOError(str(kSave, " cannot create folder ", dir, ": ", ec.message()));
  const std::string text = config_json(c).dump(2) + "\n";
  detail::write_file_atomic(join_path(dir, "config.json"), kSave,
                            [&](detail::File& f) { f.write_all(text.data(), text.size()); });
  detail::write_file_atomic(join_path(dir, "model.safetensors"), kSave, [&](detail::File& f) {
    detail::write_safetensors(f, state, {{"format", "pt"}}, kSave);
  });
}

}  // namespace ember::io
