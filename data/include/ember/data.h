// ember::data: datasets, the DataLoader, MNIST / Fashion-MNIST.
#pragma once

#include "ember/data/dataloader.h"
#include "ember/data/dataset.h"
#include "ember/data/mnist.h"
