// amp: automatic mixed precision. The autocast guard (which ops run in f16/bf16, which in f32:
// docs/amp.md) and GradScaler (loss scaling for f16 training).
#pragma once

#include "ember/amp/autocast.h"
#include "ember/amp/grad_scaler.h"
