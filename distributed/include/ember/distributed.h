// distributed: data-parallel training over MPI (CPU tensors) and NCCL (CUDA tensors), launched
// by mpirun. The environment and process groups, DistributedDataParallel, ZeRO-1. The
// DistributedSampler that shards a DataLoader's order lives in data (ember/data/distributed_sampler.h).
#pragma once

#include "ember/distributed/ddp.h"
#include "ember/distributed/fsdp.h"
#include "ember/distributed/init.h"
#include "ember/distributed/mesh.h"
#include "ember/distributed/process_group.h"
#include "ember/distributed/zero.h"
