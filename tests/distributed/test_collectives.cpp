// Every collective of the CPU group (MPI under mpirun, the local group alone) against the
// result computed here from every rank's known input, for each dtype and reduction.
#include <cmath>

#include "dist_util.h"

using namespace ember;
using namespace ember::test;
using distributed::ReduceOp;

namespace {

constexpr int64_t kN = 7;

// Rank r's input: small integers (exact in every dtype, f16/bf16 included), different per rank.
double value(int r, int64_t i) { return double((r + 1) * (i % 5) - 2 * i + 3 * r); }

Tensor input(int r, DType dtype, int64_t n = kN) {
  std::vector<double> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(value(r, i));
  return tensor(v, Shape{n}).to(dtype);
}

double reduce_ref(ReduceOp op, int64_t i, DType dtype) {
  const int w = world();
  double acc = value(0, i);
  for (int r = 1; r < w; ++r) {
    const double v = value(r, i);
    if (op == ReduceOp::sum || op == ReduceOp::avg) acc += v;
    if (op == ReduceOp::max) acc = std::max(acc, v);
    if (op == ReduceOp::min) acc = std::min(acc, v);
  }
  if (op == ReduceOp::avg) acc = is_floating(dtype) ? acc / w : std::trunc(acc / w);
  return acc;
}

const DType kDtypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i64, DType::i32};
const ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min};

}  // namespace

TEST(Collectives, AllReduceEveryDtypeAndOp) {
  auto pg = distributed::default_group();
  EXPECT_EQ(pg->size(), world());
  EXPECT_EQ(pg->rank(), my_rank());
  EXPECT_STREQ(pg->backend(), world() > 1 ? "mpi" : "local");
  for (DType dt : kDtypes)
    for (ReduceOp op : kOps) {
      Tensor t = input(my_rank(), dt);
      pg->all_reduce(t, op);
      EXPECT_EQ(t.dtype(), dt);
      std::vector<double> expected;
      for (int64_t i = 0; i < kN; ++i) expected.push_back(reduce_ref(op, i, dt));
      EXPECT_TRUE(all_close(t, expected, 0, 0)) << dtype_name(dt) << " " << reduce_op_name(op);
    }
}

TEST(Collectives, BroadcastFromEveryRoot) {
  auto pg = distributed::default_group();
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i64, DType::i32, DType::u8})
    for (int root = 0; root < world(); ++root) {
      Tensor t = input(my_rank(), DType::f64).abs().to(dt);  // abs: u8 holds it
      pg->broadcast(t, root);
      EXPECT_TRUE(all_close(t, input(root, DType::f64).abs().to(dt), 0, 0)) << dtype_name(dt) << " root " << root;
    }
}

TEST(Collectives, AllGather) {
  auto pg = distributed::default_group();
  for (DType dt : kDtypes) {
    Tensor out = zeros({world(), kN}, dt);
    pg->all_gather(out, input(my_rank(), dt));
    for (int r = 0; r < world(); ++r)
      EXPECT_TRUE(all_close(out.select(0, r), input(r, dt), 0, 0)) << dtype_name(dt) << " slot " << r;
  }
  // In place: the input is this rank's slot of the output.
  Tensor out = zeros({world() * kN});
  out.narrow(0, my_rank() * kN, kN).copy_(input(my_rank(), DType::f32));
  pg->all_gather(out, out.narrow(0, my_rank() * kN, kN));
  for (int r = 0; r < world(); ++r) EXPECT_TRUE(all_close(out.narrow(0, r * kN, kN), input(r, DType::f32), 0, 0));
}

TEST(Collectives, ReduceScatterEveryDtypeAndOp) {
  auto pg = distributed::default_group();
  const int w = world();
  for (DType dt : kDtypes)
    for (ReduceOp op : kOps) {
      Tensor in = input(my_rank(), dt, kN * w);
      Tensor out = zeros({kN}, dt);
      pg->reduce_scatter(out, in, op);
      std::vector<double> expected;
      for (int64_t i = 0; i < kN; ++i) expected.push_back(reduce_ref(op, my_rank() * kN + i, dt));
      EXPECT_TRUE(all_close(out, expected, 0, 0)) << dtype_name(dt) << " " << reduce_op_name(op);
    }
}

TEST(Collectives, AsyncWorkCompletesInIssueOrder) {
  auto pg = distributed::default_group();
  std::vector<Tensor> ts;
  std::vector<distributed::WorkPtr> works;
  for (int k = 0; k < 4; ++k) {
    ts.push_back(full({1000}, double(my_rank() + k)));
    works.push_back(pg->all_reduce(ts.back(), ReduceOp::sum, /*async_op=*/true));
  }
  for (int k = 3; k >= 0; --k) {  // waited in reverse order
    works[size_t(k)]->wait();
    EXPECT_TRUE(works[size_t(k)]->is_completed());
    double expected = 0;
    for (int r = 0; r < world(); ++r) expected += r + k;
    EXPECT_EQ(ts[size_t(k)].max().item<double>(), expected);
    EXPECT_EQ(ts[size_t(k)].min().item<double>(), expected);
  }
  pg->barrier();
}

TEST(Collectives, LargeAllReduce) {
  // 3M floats (12 MB): MPI splits it into segments; every element must come out exact.
  auto pg = distributed::default_group();
  Tensor t = full({3'000'000}, double(my_rank() + 1));
  pg->all_reduce(t, ReduceOp::sum);
  const double expected = world() * (world() + 1) / 2.0;
  EXPECT_EQ(t.max().item<double>(), expected);
  EXPECT_EQ(t.min().item<double>(), expected);
}

TEST(Collectives, ClearErrorsBeforeCommunicating) {
  auto pg = distributed::default_group();
  Tensor m = zeros({4, 6});
  const std::string nc = message_of<ValueError>([&] { pg->all_reduce(m.t()); });
  EXPECT_NE(nc.find("[all_reduce] rank " + std::to_string(my_rank())), std::string::npos) << nc;
  EXPECT_NE(nc.find("contiguous"), std::string::npos) << nc;
  const std::string dt = message_of<DTypeError>([&] { pg->all_reduce(zeros({3}, DType::b8)); });
  EXPECT_NE(dt.find("cannot reduce dtype"), std::string::npos) << dt;
  const std::string shape = message_of<ShapeError>([&] { pg->all_gather(zeros({5}), zeros({3})); });
  EXPECT_NE(shape.find("[all_gather]"), std::string::npos) << shape;
  const std::string mixed = message_of<DTypeError>([&] {
    pg->reduce_scatter(zeros({3}, DType::f64), zeros({3 * world()}, DType::f32));
  });
  EXPECT_NE(mixed.find("differs from input dtype"), std::string::npos) << mixed;
  EXPECT_NE(message_of<ValueError>([&] { pg->broadcast(zeros({2}), world()); }).find("root"),
            std::string::npos);
  // Still usable afterwards (no rank started a collective).
  Tensor t = ones({2});
  pg->all_reduce(t);
  EXPECT_EQ(t.sum().item<double>(), 2.0 * world());
}

TEST(Collectives, CudaGroupRejectsCpuTensors) {
  EMBER_NCCL_DEVICE_OR_SKIP(dev);
  auto pg = distributed::default_group(dev);
  EXPECT_STREQ(pg->backend(), "nccl");
  const std::string msg = message_of<DeviceError>([&] { pg->all_reduce(ones({3})); });
  EXPECT_NE(msg.find("nccl process group communicates tensors on cuda"), std::string::npos) << msg;
}

// A collective issued from a side stream runs after what that stream produced: the group's
// communication stream waits on the caller's current stream, not on the default one. The
// host polls is_completed() before anything synchronizes the side stream, so in the CUDA
// simulation (deferred streams) a missing wait copies the inputs before they are written.
TEST(Collectives, NcclCollectiveWaitsForTheCallersStream) {
  EMBER_NCCL_DEVICE_OR_SKIP(dev);
  auto pg = distributed::default_group(dev);
  cuda::Stream side(cuda::StreamOptions{.device = dev.index, .non_blocking = true});
  cuda::StreamGuard guard(side);
  Tensor in = input(my_rank(), DType::f32).to(dev);  // written on the side stream
  Tensor g = zeros({world() * kN}, dev);
  auto work = pg->all_gather(g, in, /*async_op=*/true);
  while (!work->is_completed()) {
  }
  work->wait();
  for (int r = 0; r < world(); ++r) EXPECT_TRUE(all_close(g.narrow(0, r * kN, kN).cpu(), input(r, DType::f32), 0, 0));
}

TEST(Collectives, NcclEveryCollectiveOnOneCard) {
  EMBER_NCCL_DEVICE_OR_SKIP(dev);
  auto pg = distributed::default_group(dev);
  for (DType dt : kDtypes)
    for (ReduceOp op : kOps) {
      Tensor t = input(my_rank(), dt).to(dev);
      pg->all_reduce(t, op);
      std::vector<double> expected;
      for (int64_t i = 0; i < kN; ++i) expected.push_back(reduce_ref(op, i, dt));
      EXPECT_TRUE(all_close(t.cpu(), expected, 0, 0)) << dtype_name(dt) << " " << reduce_op_name(op);
      Tensor in = input(my_rank(), dt, kN * world()).to(dev), out = zeros({kN}, TensorOptions(dt).device(dev));
      pg->reduce_scatter(out, in, op);
      expected.clear();
      for (int64_t i = 0; i < kN; ++i) expected.push_back(reduce_ref(op, my_rank() * kN + i, dt));
      EXPECT_TRUE(all_close(out.cpu(), expected, 0, 0)) << dtype_name(dt) << " " << reduce_op_name(op);
    }
  Tensor b = input(my_rank(), DType::f32).to(dev);
  pg->broadcast(b, 0);
  EXPECT_TRUE(all_close(b.cpu(), input(0, DType::f32), 0, 0));
  Tensor g = zeros({world() * kN}, dev);
  auto work = pg->all_gather(g, input(my_rank(), DType::f32).to(dev), /*async_op=*/true);
  work->wait();
  for (int r = 0; r < world(); ++r) EXPECT_TRUE(all_close(g.narrow(0, r * kN, kN).cpu(), input(r, DType::f32), 0, 0));
  pg->barrier();
}
