// ember::optim: optimizers (SGD, Adam, AdamW with fused multi-tensor updates; RMSprop, Adagrad),
// learning-rate schedulers and gradient clipping.
#pragma once

#include "ember/optim/adam.h"
#include "ember/optim/clip_grad.h"
#include "ember/optim/lr_scheduler.h"
#include "ember/optim/optimizer.h"
#include "ember/optim/rmsprop.h"
#include "ember/optim/sgd.h"
