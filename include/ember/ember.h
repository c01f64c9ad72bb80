// ember: one include for the whole user-facing API.
#pragma once

#include "ember/autograd/anomaly.h"
#include "ember/autograd/engine.h"
#include "ember/autograd/function.h"
#include "ember/cuda.h"
#include "ember/cuda_graph.h"
#include "ember/cuda_memory.h"
#include "ember/deterministic.h"
#include "ember/factory.h"
#include "ember/functions.h"
#include "ember/grad_mode.h"
#include "ember/ops/matmul_config.h"
#include "ember/profiler.h"
#include "ember/random.h"
#include "ember/state_dict.h"
#include "ember/tensor.h"
#include "ember/threads.h"

// Libraries above autograd.
#include "ember/amp.h"
#include "ember/data.h"
#include "ember/data/distributed_sampler.h"
#include "ember/distributed.h"
#include "ember/io.h"
#include "ember/nn.h"
#include "ember/optim.h"
