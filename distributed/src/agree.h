// Set-up calls that every rank must make with the same arguments (new_group, DeviceMesh,
// fully_shard) check it with one all_gather of a hash.
#pragma once

#include <string>

#include "ember/distributed/process_group.h"

namespace ember::distributed::detail {

// Every rank of `group` passes the same `what` (a description of its arguments), or every
// rank throws DistributedError naming the ranks that passed something else than rank 0.
void check_same_on_every_rank(ProcessGroup& group, const char* op, const std::string& what);

}  // namespace ember::distributed::detail
