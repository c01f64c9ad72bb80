// ProcessGroup's shared half: the checks every backend relies on (Note [collective checks]),
// async/sync handling, and the local group of a world of one process.
#include "ember/distributed/process_group.h"

#include "backends.h"
#include "ember/factory.h"
#include "ember/grad_mode.h"
#include "ember/ops/elementwise.h"

#include <algorithm>

namespace ember::distributed {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::avg: return "avg";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
  }
  return "?";
}

namespace {
class CompletedWork final : public Work {
 public:
  void wait() override {}
  bool is_completed() override { return true; }
};

bool reducible(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16 ||
         t == DType::i64 || t == DType::i32;
}
}  // namespace

namespace detail {
WorkPtr completed_work() { return std::make_shared<CompletedWork>(); }
}  // namespace detail

// Note [collective checks]: backends receive only defined, contiguous tensors on the group's
// device (kind and index) with a dtype they support, so they can hand data_ptr() straight to
// MPI/NCCL. Every rank fails the same way when the mistake is the same on every rank.
void ProcessGroup::check_tensor(const char* op, const Tensor& t, const char* what,
                                bool reduction) const {
  EMBER_CHECK(t.defined(), ValueError, where(op), ": the ", what, " tensor is undefined");
  const Device d = device();
  EMBER_CHECK(t.device().type == d.type && (d.is_cpu() || t.device() == d), DeviceError, where(op), ": the ",
              backend(), " process group communicates tensors on ",
              d.is_cpu() ? std::string("cpu") : d.str(), ", but the ", what, " tensor (", t,
              ") is on ", t.device(), "; use distributed::default_group(tensor.device())");
  EMBER_CHECK(t.is_contiguous(), ValueError, where(op), ": the ", what, " tensor (",
              t, ") must be contiguous; pass t.contiguous() and copy the result back");
  EMBER_CHECK(!reduction || reducible(t.dtype()), DTypeError, where(op), ": cannot reduce dtype ", t.dtype(),
              "; supported: f32, f64, f16, bf16, i64, i32");
}

WorkPtr ProcessGroup::finish(WorkPtr work, bool async_op) {
  if (!async_op) work->wait();
  return work;
}

WorkPtr ProcessGroup::all_reduce(const Tensor& tensor, ReduceOp op, bool async_op) {
  check_tensor("all_reduce", tensor, "input", true);
  return finish(do_all_reduce(tensor, op), async_op);
}

WorkPtr ProcessGroup::broadcast(const Tensor& tensor, int root, bool async_op) {
  check_tensor("broadcast", tensor, "input", false);
  EMBER_CHECK(root >= 0 && root < size_, ValueError, where("broadcast"), ": root ", root,
              " is not a rank of this group of ", size_);
  return finish(do_broadcast(tensor, root), async_op);
}

WorkPtr ProcessGroup::all_gather(const Tensor& output, const Tensor& input, bool async_op) {
  check_tensor("all_gather", input, "input", false);
  check_tensor("all_gather", output, "output", false);
  EMBER_CHECK(output.dtype() == input.dtype(), DTypeError, where("all_gather"),
              ": output dtype ", output.dtype(), " differs from input dtype ", input.dtype());
  EMBER_CHECK(output.numel() == input.numel() * size_, ShapeError, where("all_gather"),
              ": output ", output.sizes(), " must hold ", size_, " x ", input.numel(),
              " elements (input ", input.sizes(), ")");
  return finish(do_all_gather(output, input), async_op);
}

WorkPtr ProcessGroup::reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op,
                                     bool async_op) {
  check_tensor("reduce_scatter", input, "input", true);
  check_tensor("reduce_scatter", output, "output", true);
  EMBER_CHECK(output.dtype() == input.dtype(), DTypeError, where("reduce_scatter"),
              ": output dtype ", output.dtype(), " differs from input dtype ", input.dtype());
  EMBER_CHECK(input.numel() == output.numel() * size_, ShapeError, where("reduce_scatter"),
              ": input ", input.sizes(), " must hold ", size_, " x ", output.numel(),
              " elements (output ", output.sizes(), ")");
  return finish(do_reduce_scatter(output, input, op), async_op);
}

void ProcessGroup::barrier() { do_barrier(); }

ProcessGroup::ProcessGroup(int rank, int size) : rank_(rank), size_(size), global_ranks_(size_t(size)) {
  for (int r = 0; r < size; ++r) global_ranks_[size_t(r)] = r;
}

std::string ProcessGroup::where(const char* op) const {
  return name_ == "world" ? str("[", op, "] rank ", rank_)
                          : str("[", op, "] rank ", rank_, " of group '", name_, "'");
}

// Every rank learns every rank's (color, key) first, so each works out its new group's
// membership itself (and the world ranks it maps to) and the backend only makes the
// communicator. The gather runs on this group's device (a CUDA tensor for NCCL): groups are
// made at set-up, so its host synchronization costs nothing that matters.
std::shared_ptr<ProcessGroup> ProcessGroup::split(int color, int key, const std::string& group_name) {
  EMBER_CHECK(color < 0 || !group_name.empty(), ValueError, where("split"),
              ": a new group needs a name (it goes into every error message about it)");
  Tensor mine = tensor(std::vector<int64_t>{color, key}, {2}, TensorOptions(device()).dtype(DType::i64));
  Tensor all = empty({2 * int64_t(size_)}, TensorOptions(device()).dtype(DType::i64));
  all_gather(all, mine);
  const std::vector<int64_t> ck = all.cpu().to_vector<int64_t>();
  std::vector<int> members;  // ranks of this group, in new-group order
  if (color >= 0) {
    for (int r = 0; r < size_; ++r)
      if (ck[size_t(2 * r)] == color) members.push_back(r);
    std::stable_sort(members.begin(), members.end(),
                     [&](int a, int b) { return ck[size_t(2 * a + 1)] < ck[size_t(2 * b + 1)]; });
  }
  const int new_rank = int(std::find(members.begin(), members.end(), rank_) - members.begin());
  std::shared_ptr<ProcessGroup> group = do_split(color, key, new_rank, int(members.size()));
  if (color < 0) return nullptr;
  EMBER_CHECK(group && group->rank() == new_rank && group->size() == int(members.size()),
              distributed::DistributedError, where("split"), ": the backend made group '", group_name, "' with rank ",
              group ? group->rank() : -1, " of ", group ? group->size() : 0, ", expected ", new_rank, " of ",
              members.size());
  group->name_ = group_name;
  for (size_t i = 0; i < members.size(); ++i) group->global_ranks_[i] = global_ranks_[size_t(members[i])];
  group->set_timeout(timeout());
  return group;
}

namespace detail {
namespace {
// One process: every reduction of one contribution is that contribution (avg included).
class LocalProcessGroup final : public ProcessGroup {
 public:
  explicit LocalProcessGroup(Device device) : ProcessGroup(0, 1), device_(device) {}
  const char* backend() const override { return "local"; }
  Device device() const override { return device_; }

 protected:
  WorkPtr do_all_reduce(const Tensor&, ReduceOp) override { return completed_work(); }
  WorkPtr do_broadcast(const Tensor&, int) override { return completed_work(); }
  WorkPtr do_all_gather(const Tensor& output, const Tensor& input) override {
    return copy(output, input);
  }
  WorkPtr do_reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp) override {
    return copy(output, input);
  }
  void do_barrier() override {}
  std::shared_ptr<ProcessGroup> do_split(int color, int, int, int) override {
    return color < 0 ? nullptr : std::make_shared<LocalProcessGroup>(device_);
  }

 private:
  // A raw write, as MPI's and NCCL's: no version bump (fully_shard gathers into parameters
  // that autograd saved, Note [released storage]).
  static WorkPtr copy(const Tensor& output, const Tensor& input) {
    if (output.data_ptr() != input.data_ptr()) {
      NoGradGuard no_grad;
      ops::copy_(output.detach().view({-1}), input.detach().reshape({-1}));
    }
    return completed_work();
  }
  Device device_;
};
}  // namespace

std::shared_ptr<ProcessGroup> make_local_group(Device device) {
  return std::make_shared<LocalProcessGroup>(device);
}
}  // namespace detail

}  // namespace ember::distributed
