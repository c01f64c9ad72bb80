// ember's nn library: Module, the layers, nn::functional, nn::init and the GPT model.
#pragma once

#include "ember/nn/functional.h"
#include "ember/nn/gpt.h"
#include "ember/nn/init.h"
#include "ember/nn/layers.h"
#include "ember/nn/module.h"
