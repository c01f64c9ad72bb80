// Subgroups of the world: new_group (torch.distributed.new_group) and DeviceMesh
// (torch.distributed.device_mesh.init_device_mesh), the layout FSDP and tensor parallelism
// shard over.
//
//   distributed::DeviceMesh mesh(Device::cpu(), {2, 2}, {"dp", "tp"});   // 4 ranks
//   auto tp = mesh.group("tp");   // the 2 ranks that share this rank's "dp" coordinate
//   auto dp = mesh.group("dp");   // the 2 ranks that share its "tp" coordinate
//
// Invariants:
// - Both are collective over the world: every rank makes the same calls with the same
//   arguments, in the same order (a rank that passes a different rank list or mesh shape is
//   an error on every rank, naming the ranks that disagree). They sit on
//   ProcessGroup::split(): every subgroup has its own communicator.
// - A mesh lays the world out row-major: world rank r has coordinate
//   (r / (shape[1] * ...), ...), so the last dimension's ranks are adjacent (tensor
//   parallelism within a node, data parallelism across nodes, as init_device_mesh does).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ember/distributed/process_group.h"

namespace ember::distributed {

// The group of `ranks` (world ranks, strictly increasing) over the default group of `device`'s
// kind; nullptr on ranks not in it. Named `name`, or "ranks [0, 2]" when empty.
std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks, Device device = Device::cpu(),
                                        std::string name = "");

class DeviceMesh {
 public:
  // shape's product must be the world size; one name per dimension, distinct, non-empty.
  DeviceMesh(Device device, std::vector<int> shape, std::vector<std::string> dim_names);

  const std::vector<int>& shape() const { return shape_; }
  const std::vector<std::string>& dim_names() const { return names_; }
  Device device() const { return device_; }
  // The ranks that share this rank's coordinates in every other dimension, ordered along `dim`
  // (group(dim)->rank() == coordinate(dim)). Throws ValueError for an unknown name.
  std::shared_ptr<ProcessGroup> group(const std::string& dim) const;
  std::shared_ptr<ProcessGroup> group(int dim) const;
  int coordinate(const std::string& dim) const;
  int size(const std::string& dim) const;
  int ndim() const { return int(shape_.size()); }

 private:
  int index(const std::string& dim) const;

  Device device_;
  std::vector<int> shape_;
  std::vector<std::string> names_;
  std::vector<int> coords_;
  std::vector<std::shared_ptr<ProcessGroup>> groups_;
};

}  // namespace ember::distributed
