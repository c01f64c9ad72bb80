// Hugging Face GPT-2 checkpoints in and out of nn::GPT: a folder with config.json and
// model.safetensors, as `transformers` (GPT2LMHeadModel.save_pretrained) writes it and as the
// hub serves openai-community/gpt2, gpt2-medium, gpt2-large and gpt2-xl.
//
//   auto model = io::gpt2_from_pretrained("gpt2", Device::cuda());   // fine-tune or sample
//   ...
//   io::save_pretrained(*model, "gpt2-finetuned");   // transformers' from_pretrained reads it
//
// Invariants:
// - Names: HF's are ember's (ember/nn/gpt.h) with or without the "transformer." prefix
//   (save_pretrained writes it, the hub's gpt2 file does not). The buffers h.N.attn.bias and
//   h.N.attn.masked_bias (causal masks of older transformers) are ignored; lm_head.weight, if
//   present, must equal wte (the head is tied in ember). Every ember parameter is read from
//   exactly one tensor; a missing, unexpected or wrongly shaped tensor is an error naming it.
// - Layout: HF's Conv1D layers (attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj) store
//   weight [in, out], ember's Linear [out, in]: transposed both ways. HF's wte has vocab_size
//   rows; ember's has padded_vocab_size (vocab_size rounded up to a multiple of 64, llm.c's
//   50257 -> 50304), the extra rows zero. Saving writes back the first vocab_size rows.
// - Files in F32, F16, BF16 (or F64) load into ember's f32 model; saving writes F32 from the
//   CPU, whatever the model's device and dtype.
// - save_pretrained's model.safetensors is byte for byte what transformers' save_pretrained
//   (through the safetensors library) writes for the same weights: "transformer."-prefixed
//   names, no lm_head (tied), tensors sorted by name, metadata {"format": "pt"}.
#pragma once

#include <memory>
#include <string>

#include "ember/device.h"
#include "ember/nn/gpt.h"

namespace ember::io {

// Reads DIR/config.json and DIR/model.safetensors into a new GPT on `device`. The config must
// describe the architecture ember implements (model_type gpt2, activation_function gelu_new,
// layer_norm_epsilon 1e-5, scaled attention, no per-layer scaling or reordered upcast, tied
// embeddings): anything else is a ValueError naming the field. `dropout` becomes
// GPTConfig::dropout (the file's *_pdrop are training settings, not weights; nanoGPT also
// fine-tunes from them with its own). Loading leaves the default generator's state as it
// was (the model's random init, overwritten, draws nothing from the user's stream).
// Errors: IOError (a file missing or unreadable), ValueError (config field, missing or
// unexpected tensor, untied lm_head), ShapeError (a tensor of the wrong shape, both shapes
// named), DTypeError (a non-floating tensor); messages start "[gpt2_from_pretrained]".
std::unique_ptr<nn::GPT> gpt2_from_pretrained(const std::string& dir, Device device = Device::cpu(),
                                              double dropout = 0.0);

// Writes DIR/config.json (GPT2Config's keys) and DIR/model.safetensors (see the invariants)
// for `model`, creating DIR if needed; each file is replaced atomically.
void save_pretrained(const nn::GPT& model, const std::string& dir);

}  // namespace ember::io
