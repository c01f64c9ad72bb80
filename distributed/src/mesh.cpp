// new_group and DeviceMesh (ember/distributed/mesh.h) over ProcessGroup::split.
#include "ember/distributed/mesh.h"

#include <algorithm>
#include <set>

#include "agree.h"
#include "ember/distributed/init.h"
#include "ember/factory.h"

namespace ember::distributed {

namespace {
std::string join(const std::vector<int>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

}  // namespace

void detail::check_same_on_every_rank(ProcessGroup& world, const char* op, const std::string& what) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : what) h = (h ^ c) * 1099511628211ull;
  Tensor mine = tensor(std::vector<int64_t>{int64_t(h >> 1)}, {1}, TensorOptions(world.device()).dtype(DType::i64));
  Tensor all = empty({int64_t(world.size())}, TensorOptions(world.device()).dtype(DType::i64));
  world.all_gather(all, mine);
  const std::vector<int64_t> hashes = all.cpu().to_vector<int64_t>();
  std::vector<int> differ;
  for (int r = 0; r < world.size(); ++r)
    if (hashes[size_t(r)] != hashes[0]) differ.push_back(r);
  EMBER_CHECK(differ.empty(), distributed::DistributedError, "[", op, "] rank ", world.rank(), ": ranks ", join(differ),
              " passed other arguments than rank 0 (this rank passed ", what,
              "); every rank must make the same call");
}

using detail::check_same_on_every_rank;

std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks, Device device, std::string name) {
  std::shared_ptr<ProcessGroup> world = default_group(device);
  EMBER_CHECK(!ranks.empty(), ValueError, "[new_group] rank ", world->rank(), ": the rank list is empty");
  for (size_t i = 0; i < ranks.size(); ++i)
    EMBER_CHECK(ranks[i] >= 0 && ranks[i] < world->size() && (i == 0 || ranks[i] > ranks[i - 1]), ValueError,
                "[new_group] rank ", world->rank(), ": ranks ", join(ranks),
                " must be strictly increasing world ranks in [0, ", world->size(), ")");
  if (name.empty()) name = "ranks " + join(ranks);
  check_same_on_every_rank(*world, "new_group", "ranks " + join(ranks) + " named '" + name + "'");
  const auto it = std::find(ranks.begin(), ranks.end(), world->rank());
  const bool member = it != ranks.end();
  return world->split(member ? 0 : -1, member ? int(it - ranks.begin()) : 0, name);
}

DeviceMesh::DeviceMesh(Device device, std::vector<int> shape, std::vector<std::string> dim_names)
    : device_(device), shape_(std::move(shape)), names_(std::move(dim_names)) {
  std::shared_ptr<ProcessGroup> world = default_group(device);
  const std::string desc = "shape " + join(shape_);
  EMBER_CHECK(!shape_.empty() && names_.size() == shape_.size(), ValueError, "[DeviceMesh] rank ", world->rank(),
              ": ", desc, " needs one name per dimension, got ", names_.size());
  int64_t n = 1;
  for (int s : shape_) {
    EMBER_CHECK(s >= 1, ValueError, "[DeviceMesh] rank ", world->rank(), ": ", desc, " has a dimension below 1");
    n *= s;
  }
  EMBER_CHECK(n == world->size(), ValueError, "[DeviceMesh] rank ", world->rank(), ": ", desc, " holds ", n,
              " ranks but the world has ", world->size(), " (mpirun -np ", n, ")");
  std::set<std::string> seen;
  std::string names_desc;
  for (const std::string& s : names_) {
    EMBER_CHECK(!s.empty() && seen.insert(s).second, ValueError, "[DeviceMesh] rank ", world->rank(),
                ": dimension names must be distinct and non-empty");
    names_desc += " " + s;
  }
  check_same_on_every_rank(*world, "DeviceMesh", desc + " names" + names_desc);
  // Row-major coordinates: the last dimension varies fastest.
  coords_.assign(shape_.size(), 0);
  int rest = world->rank();
  for (int d = ndim() - 1; d >= 0; --d) {
    coords_[size_t(d)] = rest % shape_[size_t(d)];
    rest /= shape_[size_t(d)];
  }
  // The group along d: ranks equal in every other coordinate. Its color is this rank's
  // linear index with coordinate d taken out; its key the coordinate along d.
  for (int d = 0; d < ndim(); ++d) {
    int color = 0;
    for (int e = 0; e < ndim(); ++e)
      if (e != d) color = color * shape_[size_t(e)] + coords_[size_t(e)];
    groups_.push_back(world->split(color, coords_[size_t(d)], names_[size_t(d)]));
  }
}

int DeviceMesh::index(const std::string& dim) const {
  const auto it = std::find(names_.begin(), names_.end(), dim);
  EMBER_CHECK(it != names_.end(), ValueError, "[DeviceMesh] no dimension named '", dim, "'");
  return int(it - names_.begin());
}

std::shared_ptr<ProcessGroup> DeviceMesh::group(const std::string& dim) const { return groups_[size_t(index(dim))]; }
std::shared_ptr<ProcessGroup> DeviceMesh::group(int dim) const {
  EMBER_CHECK(dim >= 0 && dim < ndim(), ValueError, "[DeviceMesh] dimension ", dim, " out of range for a ",
              ndim(), "-D mesh");
  return groups_[size_t(dim)];
}
int DeviceMesh::coordinate(const std::string& dim) const { return coords_[size_t(index(dim))]; }
int DeviceMesh::size(const std::string& dim) const { return shape_[size_t(index(dim))]; }

}  // namespace ember::distributed
