// What core/cuda and ops/cuda need to know about ember's graph captures (cuda::Graph,
// core/cuda/graph.cpp): whether any is under way, the objects a capture keeps alive, and the
// memory its graph reads until it is reset.
//
// Note [capture resources]: a captured kernel's pointers are baked into the graph, so scratch
// memory it uses (cuBLASLt's workspace) must stay allocated, and used by nothing else that
// could run concurrently with a replay, for as long as the graph may replay. Such an object
// belongs to the capture: capture_resource makes it at the capture's first request (its
// memory comes from the graph's private pool like every allocation of the capture), hands
// the same one to every later request of that capture, and the graph holds it until it is
// reset or destroyed; then it is dropped before the graph's pool is released, so the pool
// can empty. A process-wide cache keyed by the capture stream would instead keep it (and so
// the graph's whole pool) forever.
//
// A capture is identified by CUDA's capture id (cudaStreamGetCaptureInfo), not by a stream:
// a side stream joined into the capture (it waited on an event recorded on the capture
// stream) is capturing into the same graph, and its kernels must use the capture's objects,
// not the ones that side stream uses eagerly (those run concurrently with replays).
//
// Memory outside the device allocator that a captured operation reads or writes (a pinned
// host block read by a captured copy) is tied to the graph the same way, with
// call_on_graph_release: the graph calls back when it is reset or destroyed, naming every
// stream it was replayed on, so the owner can wait for those replays (events) before reusing
// the memory. An event recorded at the end of the capture would complete at once: the
// capture itself runs nothing.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <memory>
#include <vector>

namespace ember::cuda::detail {

// Graph captures in progress in this process, on any thread (0 most of the time: callers use
// it as a fast path before anything else).
int captures_under_way();

// The object stored under `key` for the ember graph capture that `stream` (of the current
// device) takes part in, made by `make` at the first request; nullptr (make not called) when
// `stream` takes part in no cuda::Graph capture. `make` runs with the capture's own stream
// current on this thread (so its device memory comes from the graph's pool even when
// `stream` is a joined side stream) and without ember's capture registry lock held. Throws
// Error when `stream`'s capture has been invalidated (it can produce no graph).
// Thread-safe.
std::shared_ptr<void> capture_resource(cudaStream_t stream, const void* key,
                                       const std::function<std::shared_ptr<void>()>& make);

// Called once when a captured graph is reset or destroyed (or its capture abandoned), with the
// graph's device and every stream it was replayed on (none when it never was). It runs on
// the thread that resets the graph, with no ember lock held; an exception it throws is
// reported on stderr, not propagated.
using GraphRelease = std::function<void(int device, const std::vector<cudaStream_t>& replay_streams)>;

enum class GraphHold {
  none,         // `stream` is not capturing
  held,         // `release` will be called once
  held_before,  // a release under `key` was already registered for this capture: not this one
  invalidated,  // the capture was invalidated: it will produce no graph, nothing will replay
  unknown,      // a capture not made by cuda::Graph: ember cannot know when its graph dies
};

// Registers `release` under `key` for the cuda::Graph capture that `stream` (of the current
// device) takes part in. Thread-safe.
GraphHold call_on_graph_release(cudaStream_t stream, const void* key, const GraphRelease& release);

}  // namespace ember::cuda::detail
