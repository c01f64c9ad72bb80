// ember::data: datasets, the DataLoader, MNIST / Fashion-MNIST, GPT-2's BPE tokenizer, token
// shards (llm.c's .bin format) and the Brown corpus helpers.
#pragma once

#include "ember/data/brown.h"
#include "ember/data/dataloader.h"
#include "ember/data/dataset.h"
#include "ember/data/mnist.h"
#include "ember/data/token_shards.h"
#include "ember/data/tokenizer.h"
