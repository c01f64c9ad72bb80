// distributed: data-parallel training over MPI (CPU tensors) and NCCL (CUDA tensors), launched
// by mpirun. The environment, process groups and meshes, DistributedDataParallel, ZeRO-1,
// fully_shard (FSDP / ZeRO-3), tensor parallelism. The
// DistributedSampler that shards a DataLoader's order lives in data (ember/data/distributed_sampler.h).
#pragma once

#include "ember/distributed/ddp.h"
#include "ember/distributed/fsdp.h"
#include "ember/distributed/init.h"
#include "ember/distributed/mesh.h"
#include "ember/distributed/process_group.h"
#include "ember/distributed/tensor_parallel.h"
#include "ember/distributed/zero.h"
