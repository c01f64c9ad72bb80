// ember's nn library: Module, the layers, nn::functional, nn::init and the GPT model.
#pragma once

#include "ember/nn/activation.h"
#include "ember/nn/containers.h"
#include "ember/nn/functional.h"
#include "ember/nn/loss.h"
#include "ember/nn/causal_lm.h"
#include "ember/nn/gpt.h"
#include "ember/nn/llama.h"
#include "ember/nn/generation.h"
#include "ember/nn/init.h"
#include "ember/nn/conv_layers.h"
#include "ember/nn/layers.h"
#include "ember/nn/pooling.h"
#include "ember/nn/module.h"
#include "ember/nn/rnn.h"
#include "ember/nn/normalization.h"
#include "ember/nn/transformer.h"
