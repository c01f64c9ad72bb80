// Note [device choice] (ember/distributed/init.h): distributed decides each rank's GPU
// (cuda:(local_rank % devices it sees)) and refuses two ranks on one physical GPU, found from
// every rank's host name and GPU UUID / PCI bus id gathered at init. The decision is a pair of
// pure functions, tested here on the CPU against hand-written jobs; local_device() is checked
// against this process's own environment in both runs of the binary.
#include "dist_util.h"

using namespace ember;
using distributed::DistributedError;
using distributed::detail::check_own_gpu;
using distributed::detail::cuda_device_for_rank;
using distributed::detail::RankGpu;

namespace {
// A rank of host `host` on the GPU whose UUID is `uuid` (as index `device` of those it sees).
RankGpu on(const std::string& host, int device, const std::string& uuid, const std::string& pci = "") {
  return {host, device, uuid, pci};
}
std::string clash(int rank, const std::vector<RankGpu>& ranks) {
  return test::message_of<DistributedError>([&] { check_own_gpu(rank, ranks); });
}
}  // namespace

TEST(DeviceChoice, EachRankTakesItsLocalRankAmongTheDevicesItSees) {
  EXPECT_EQ(cuda_device_for_rank(0, 0, 1), Device::cuda(0));
  // Two nodes of 4 GPUs and 4 ranks each: global rank 6 is local rank 2 of its node.
  EXPECT_EQ(cuda_device_for_rank(6, 2, 4), Device::cuda(2));
  EXPECT_EQ(cuda_device_for_rank(3, 3, 8), Device::cuda(3));  // fewer ranks than GPUs: fine
  // One GPU per rank (CUDA_VISIBLE_DEVICES=$LOCAL_RANK): local rank 5 sees one device, its own.
  EXPECT_EQ(cuda_device_for_rank(5, 5, 1), Device::cuda(0));
  const std::string none = test::message_of<DistributedError>([] { cuda_device_for_rank(2, 0, 0); });
  EXPECT_EQ(none, "[distributed.local_device] rank 2 sees no CUDA device") << none;
}

// The usual torchrun / Slurm launch: each of a node's 8 ranks sees one GPU, a different one.
// Before the fix a node running more ranks than each rank sees devices was refused outright
// ("runs 8 ranks but shows 1 CUDA device").
TEST(DeviceChoice, OneVisibleGpuPerRankIsAccepted) {
  std::vector<RankGpu> ranks;
  for (int r = 0; r < 8; ++r)
    ranks.push_back(on("node0", cuda_device_for_rank(r, r, 1).index, "GPU-000" + std::to_string(r)));
  for (int r = 0; r < 8; ++r) EXPECT_NO_THROW(check_own_gpu(r, ranks)) << r;
  // Two such nodes: PCI bus ids repeat across hosts, UUIDs do not.
  std::vector<RankGpu> two_nodes = {on("a", 0, "GPU-a0", "0000:3b:00.0"), on("a", 0, "GPU-a1", "0000:5e:00.0"),
                                    on("b", 0, "GPU-b0", "0000:3b:00.0"), on("b", 0, "GPU-b1", "0000:5e:00.0")};
  for (int r = 0; r < 4; ++r) EXPECT_NO_THROW(check_own_gpu(r, two_nodes)) << r;
  // Ranks without a GPU (a CPU job on a mixed cluster) never clash.
  std::vector<RankGpu> cpu = {on("a", -1, ""), on("a", -1, ""), on("a", 0, "GPU-x")};
  for (int r = 0; r < 3; ++r) EXPECT_NO_THROW(check_own_gpu(r, cpu)) << r;
}

TEST(DeviceChoice, TwoRanksOnOneGpuIsAClearErrorNamingThem) {
  // `mpirun -np 2` on a one-GPU workstation: both ranks take cuda:0, the same card.
  const std::vector<RankGpu> pair = {on("ws", 0, "GPU-1234", "0000:01:00.0"), on("ws", 0, "GPU-1234", "0000:01:00.0")};
  const std::string msg = clash(1, pair);
  EXPECT_EQ(msg.rfind("[distributed.local_device] rank 1 (host ws) would share its GPU (cuda:0 as it sees them, "
                      "GPU-1234, PCI 0000:01:00.0) with rank 0: each rank needs a GPU of its own",
                      0),
            0u)
      << msg;
  EXPECT_NE(msg.find("--map-by ppr:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("CUDA_VISIBLE_DEVICES"), std::string::npos) << msg;
  EXPECT_NE(clash(0, pair).find("rank 0 (host ws) would share its GPU (cuda:0 as it sees them, GPU-1234, PCI "
                                "0000:01:00.0) with rank 1:"),
            std::string::npos);
  // Three ranks on two GPUs: ranks 0 and 2 share the first, rank 1 has the second to itself.
  const std::vector<RankGpu> three = {on("n", 0, "GPU-a"), on("n", 1, "GPU-b"), on("n", 0, "GPU-a")};
  EXPECT_NE(clash(0, three).find("with rank 2:"), std::string::npos) << clash(0, three);
  EXPECT_NO_THROW(check_own_gpu(1, three));
  // Every other rank that shares it is named.
  const std::vector<RankGpu> four = {on("n", 0, "GPU-a"), on("n", 0, "GPU-a"), on("n", 0, "GPU-a"), on("n", 0, "GPU-a")};
  EXPECT_NE(clash(3, four).find("with ranks 0, 1 and 2:"), std::string::npos) << clash(3, four);
  // Containers on one node may see one GPU under different host names: the UUID still tells.
  EXPECT_NE(clash(0, {on("pod-a", 0, "GPU-a"), on("pod-b", 0, "GPU-a")}).find("with rank 1"), std::string::npos);
}

TEST(DeviceChoice, WithoutAUuidThePciBusIdDecidesOnOneHostOnly) {
  EXPECT_NE(clash(1, {on("h", 0, "", "0000:3b:00.0"), on("h", 0, "", "0000:3b:00.0")}).find("(host h) would share its "
                                                                                          "GPU (cuda:0 as it sees them, "
                                                                                          "PCI 0000:3b:00.0) with rank 0"),
            std::string::npos);
  EXPECT_NO_THROW(check_own_gpu(1, {on("h", 0, "", "0000:3b:00.0"), on("h", 1, "", "0000:5e:00.0")}));
  EXPECT_NO_THROW(check_own_gpu(1, {on("h", 0, "", "0000:3b:00.0"), on("g", 0, "", "0000:3b:00.0")}));
  // Nothing known at all (a build without NCCL reports no identity): unchecked.
  EXPECT_NO_THROW(check_own_gpu(1, {on("h", 0, ""), on("h", 0, "")}));
}

TEST(DeviceChoice, LocalDeviceFollowsTheChoiceOrSaysWhyNot) {
  EXPECT_EQ(distributed::local_device(DeviceType::CPU), Device::cpu());
  if (!cuda::is_available()) {
    const std::string msg = test::message_of<DistributedError>([] { distributed::local_device(DeviceType::CUDA); });
    EXPECT_EQ(msg.rfind("[distributed.local_device] rank " + std::to_string(test::my_rank()) + " sees no CUDA device", 0), 0u)
        << msg;
    return;
  }
  const int local = distributed::local_rank(), devices = cuda::device_count();
  // This rank's device is its local rank's among those it sees, unless another rank of the job
  // would share that GPU (e.g. mpirun -np 2 on a one-GPU machine): then both say so.
  try {
    const Device dev = distributed::local_device(DeviceType::CUDA);
    EXPECT_EQ(dev, Device::cuda(local % devices));
    if (distributed::nccl_available()) {
      EXPECT_EQ(distributed::default_group(dev)->device(), dev);
    }
  } catch (const DistributedError& e) {
    EXPECT_GT(test::world(), 1) << "a world of one has no other rank to share with: " << e.what();
    EXPECT_NE(std::string(e.what()).find("would share its GPU"), std::string::npos) << e.what();
  }
}
