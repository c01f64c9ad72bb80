// CUDA build: the host side of Note [deferred device checks] (ember/cuda/device_checks.h).
//
// Invariants:
// - One DeviceFault per device, cudaMalloc'd on first use and kept for the life of the process
//   (never from the caching allocator: a record made during a capture would come from the
//   graph's private pool and vanish with it), with a private non-blocking stream for reading
//   and resetting it: the legacy stream would fail (and invalidate the capture) while a
//   blocking stream of this device is being captured. One page-locked, mapped flag array for
//   all devices, allocated with the first record. Made in relaxed capture mode, so preparing a
//   record from a thread that is capturing does not invalidate its capture.
// - fault_site() is lock-free once a device is prepared: an acquire load of its slot.
// - raise_deferred_errors() costs one relaxed read per device when nothing was reported; only a
//   set flag leads to CUDA calls (a copy of the record and its reset).
// - A fault is raised once: the flag, then the record, are cleared before the throw; a failure
//   while reading it sets the flag again, so the fault is not lost with the device's record
//   left claimed (which would silence every later fault on that device).
#include "ember/cuda/device_checks.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "ember/cuda.h"
#include "ember/cuda/check.h"
#include "ember/cuda/device_guard.h"

namespace ember::cuda {

namespace {

constexpr int kMaxDevices = 64;

struct Slot {
  DeviceFault* record = nullptr;
  unsigned int* flag_dev = nullptr;  // the device's view of its flag
  cudaStream_t stream = nullptr;     // private, non-blocking: reads and resets the record
};

struct Records {
  std::mutex mu;  // serializes preparing and raising
  Slot slot[kMaxDevices];
  std::atomic<const Slot*> ready[kMaxDevices] = {};  // set once a slot is complete
  unsigned int* flags = nullptr;  // kMaxDevices flags, page-locked and mapped
  std::atomic<bool> any{false};   // some record exists: raise_deferred_errors has work
};

// Calls that a capture on this thread would forbid (cudaMalloc, creating a stream) are made in
// relaxed mode, and the thread's mode is put back after.
class RelaxedCapture {
 public:
  RelaxedCapture() { EMBER_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode_)); }
  ~RelaxedCapture() { (void)cudaThreadExchangeStreamCaptureMode(&mode_); }
  RelaxedCapture(const RelaxedCapture&) = delete;
  RelaxedCapture& operator=(const RelaxedCapture&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
};

Records& records() {
  static Records* r = new Records;  // leaked on purpose: kernels may outlive static destructors
  return *r;
}

std::atomic<int>& sync_mode() {
  // -1: not decided yet (read EMBER_CUDA_SYNC_CHECKS on first use).
  static std::atomic<int> mode{-1};
  return mode;
}

std::string format(const DeviceFault& f) {
  const char* op = reinterpret_cast<const char*>(static_cast<uintptr_t>(f.op));
  if (f.kind == int(FaultKind::target_out_of_bounds))
    return str("[", op, "] target ", f.value, " at position ", f.a, " is out of bounds for ", f.b,
               " classes (expected 0 <= target < ", f.b, ", or ignore_index ", f.c, ")");
  if (f.kind == int(FaultKind::not_a_probability))  // ops::kProbabilitiesMessage's words
    return str("[", op, "] all elements of input should be between 0 and 1 (probabilities: pass logits to "
                        "binary_cross_entropy_with_logits)");
  return str("[", op, "] index ", f.value, " is out of range for dim ", f.a, " of size ", f.b);
}

}  // namespace

void set_sync_checks(bool on) { sync_mode().store(on ? 1 : 0); }

bool sync_checks() {
  int m = sync_mode().load(std::memory_order_relaxed);
  if (m < 0) {
    const char* e = std::getenv("EMBER_CUDA_SYNC_CHECKS");
    m = e != nullptr && *e != '\0' && std::strcmp(e, "0") != 0 ? 1 : 0;
    int expected = -1;
    sync_mode().compare_exchange_strong(expected, m);
    m = sync_mode().load();
  }
  return m == 1;
}

namespace detail {

void prepare_fault_record(int device) {
  EMBER_CHECK(device >= 0 && device < kMaxDevices, DeviceError, "[cuda] device index ", device,
              " is outside the supported range [0, ", kMaxDevices, ")");
  Records& r = records();
  if (r.ready[device].load(std::memory_order_acquire) != nullptr) return;
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.ready[device].load(std::memory_order_acquire) != nullptr) return;
  const DeviceGuard guard(device);
  const RelaxedCapture relaxed;
  if (r.flags == nullptr) {
    void* p = nullptr;
    // Portable: mapped into every device's address space, not only the current one's.
    EMBER_CUDA_CHECK(cudaHostAlloc(&p, kMaxDevices * sizeof(unsigned int),
                                   cudaHostAllocMapped | cudaHostAllocPortable));
    std::memset(p, 0, kMaxDevices * sizeof(unsigned int));
    r.flags = static_cast<unsigned int*>(p);
  }
  Slot& s = r.slot[device];
  if (s.stream == nullptr) EMBER_CUDA_CHECK(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
  if (s.record == nullptr) {
    void* rec = nullptr;
    EMBER_CUDA_CHECK(cudaMalloc(&rec, sizeof(DeviceFault)));
    s.record = static_cast<DeviceFault*>(rec);
  }
  // Zero before any kernel can see it (once per device).
  EMBER_CUDA_CHECK(cudaMemsetAsync(s.record, 0, sizeof(DeviceFault), s.stream));
  EMBER_CUDA_CHECK(cudaStreamSynchronize(s.stream));
  void* flag_dev = nullptr;
  EMBER_CUDA_CHECK(cudaHostGetDevicePointer(&flag_dev, r.flags + device, 0));
  s.flag_dev = static_cast<unsigned int*>(flag_dev);
  r.ready[device].store(&s, std::memory_order_release);
  r.any.store(true, std::memory_order_release);
}

FaultSite fault_site(int device, FaultKind kind, const char* op, long long a, long long b, long long c) {
  prepare_fault_record(device);  // one acquire load once the device is prepared
  const Slot* slot = records().ready[device].load(std::memory_order_acquire);
  FaultSite s;
  s.record = slot->record;
  s.host_flag = slot->flag_dev;
  s.kind = int(kind);
  s.op = static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(op));
  s.a = a;
  s.b = b;
  s.c = c;
  return s;
}

thread_local int t_held = 0;

DeferredErrorsHeld::DeferredErrorsHeld() { ++t_held; }
DeferredErrorsHeld::~DeferredErrorsHeld() { --t_held; }

void raise_deferred_errors() {
  if (t_held > 0) return;  // library code synchronizing for itself: left for the user's next sync
  Records& r = records();
  if (!r.any.load(std::memory_order_acquire)) return;
  for (int d = 0; d < kMaxDevices; ++d) {
    const Slot* slot = r.ready[d].load(std::memory_order_acquire);
    if (slot == nullptr) continue;
    volatile unsigned int* flag = r.flags + d;
    if (*flag == 0u) continue;
    std::lock_guard<std::mutex> lock(r.mu);
    if (*flag == 0u) continue;  // another thread raised it meanwhile
    // The flag first, then the record: a kernel that faults once the record is free again sets
    // the flag anew (raised at a later synchronization). Clearing the flag after the reset could
    // erase that new fault's flag while its claim stays in the record, silencing the device.
    *flag = 0u;
    DeviceFault f{};
    try {
      const DeviceGuard guard(d);
      // On the record's own non-blocking stream: the fault's kernel has completed (the flag is
      // set after the record is written), and no other stream or capture is touched. A copy
      // to pageable memory returns once it is done.
      EMBER_CUDA_CHECK(cudaMemcpyAsync(&f, slot->record, sizeof(f), cudaMemcpyDeviceToHost, slot->stream));
      EMBER_CUDA_CHECK(cudaMemsetAsync(slot->record, 0, sizeof(DeviceFault), slot->stream));
      EMBER_CUDA_CHECK(cudaStreamSynchronize(slot->stream));
    } catch (...) {
      *flag = 1u;  // still pending: the next synchronization tries again
      throw;
    }
    if (f.claimed == 0) continue;  // nothing complete to report (cannot happen after a flag)
    if (f.kind == int(FaultKind::not_a_probability)) throw ValueError(format(f));
    throw IndexError(format(f));
  }
}

void after_checked_launch(cudaStream_t stream) {
  if (!sync_checks()) return;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  EMBER_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  if (capture != cudaStreamCaptureStatusNone) return;  // nothing may wait inside a capture
  EMBER_CUDA_CHECK(cudaStreamSynchronize(stream));
  raise_deferred_errors();
}

}  // namespace detail
}  // namespace ember::cuda
