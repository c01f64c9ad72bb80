// Adagrad lives beside RMSprop (same shape of update, one file).
#pragma once

#include "ember/optim/rmsprop.h"
