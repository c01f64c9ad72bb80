// ember's nn library: Module, the layers, nn::functional and nn::init.
#pragma once

#include "ember/nn/functional.h"
#include "ember/nn/init.h"
#include "ember/nn/layers.h"
#include "ember/nn/module.h"
