// The block scheduler of the SIMT layer (ember/cuda_sim/simt.h: the invariants). One block at
// a time: its threads are fibers; the scheduler runs runnable fibers in the schedule's lane
// order until each blocks, then releases complete warp collectives and, when every thread
// waits at it, the block barrier.
#include "ember/cuda_sim/simt.h"

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <iterator>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <unordered_map>
#include <vector>

// AddressSanitizer follows the fibers' stack switches only when told (its fake stacks and
// stack bounds are per stack); without it, every switch reads as a stack overflow or a wild
// access. No-ops in other builds.
#if defined(__SANITIZE_ADDRESS__)
#define EMBER_SIM_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMBER_SIM_ASAN 1
#endif
#endif
#ifdef EMBER_SIM_ASAN
extern "C" {
void __sanitizer_start_switch_fiber(void** fake_stack_save, const void* bottom, size_t size);
void __sanitizer_finish_switch_fiber(void* fake_stack_save, const void** bottom_old, size_t* size_old);
void __asan_unpoison_memory_region(const volatile void* addr, size_t size);
}
#endif

namespace ember::cuda::sim {
namespace {

// Before a switch to the stack [bottom, bottom + size); `save` keeps the leaving stack's fake
// frames (nullptr: the leaving fiber is gone for good).
inline void switch_starts(void** save, const void* bottom, size_t size) {
#ifdef EMBER_SIM_ASAN
  __sanitizer_start_switch_fiber(save, bottom, size);
#else
  (void)save, (void)bottom, (void)size;
#endif
}
// First thing on the stack switched to; receives the bounds of the stack left.
inline void switch_done(void* save, const void** bottom_old = nullptr, size_t* size_old = nullptr) {
#ifdef EMBER_SIM_ASAN
  __sanitizer_finish_switch_fiber(save, bottom_old, size_old);
#else
  (void)save, (void)bottom_old, (void)size_old;
#endif
}

// ---- fiber contexts. On x86-64 a switch saves the callee-saved registers and the FP control
// words on the leaving stack and loads the other stack: no system call (glibc's swapcontext
// saves the signal mask with one per switch, which made kernels spend most of their time in
// the kernel). Elsewhere ucontext.
#if defined(__x86_64__)
extern "C" void ember_sim_switch_stack(void** save_sp, void* load_sp);
asm(R"(
  .text
  .globl ember_sim_switch_stack
  .type ember_sim_switch_stack, @function
ember_sim_switch_stack:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size ember_sim_switch_stack, .-ember_sim_switch_stack
  .section .note.GNU-stack,"",@progbits
  .text
)");
struct Context {
  void* sp = nullptr;
};
inline void switch_context(Context& from, Context& to) { ember_sim_switch_stack(&from.sp, to.sp); }
// A context that starts `entry` (which never returns) on [stack, stack + bytes): the frame
// ember_sim_switch_stack pops, returning into entry as if called (rsp = 8 mod 16 there).
void make_context(Context& c, char* stack, size_t bytes, void (*entry)()) {
  auto top = reinterpret_cast<uintptr_t>(stack + bytes) & ~uintptr_t(15);
#ifdef EMBER_SIM_ASAN
  // A stack is reused by the next block's fiber: the frames of the last one, which never
  // returned, are still poisoned where this frame goes (each new frame repoisons its own).
  __asan_unpoison_memory_region(reinterpret_cast<void*>(top - 4096), 4096);
#endif
  auto* slot = reinterpret_cast<uint64_t*>(top - 16);
  slot[0] = reinterpret_cast<uint64_t>(entry);  // popped by ret
  slot[1] = 0;                                   // entry's return address: ends backtraces
  for (int r = 1; r <= 6; ++r) slot[-r] = 0;     // rbp, rbx, r12..r15
  uint32_t mxcsr;
  uint16_t fpcw;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(fpcw));
  auto* control = reinterpret_cast<uint32_t*>(slot - 7);
  control[0] = mxcsr;
  control[1] = fpcw;
  c.sp = slot - 7;
}
#else
struct Context {
  ucontext_t uc{};
};
inline void switch_context(Context& from, Context& to) { swapcontext(&from.uc, &to.uc); }
void make_context(Context& c, char* stack, size_t bytes, void (*entry)()) {
  getcontext(&c.uc);
  c.uc.uc_stack.ss_sp = stack;
  c.uc.uc_stack.ss_size = bytes;
  c.uc.uc_link = nullptr;
  makecontext(&c.uc, entry, 0);
}
#endif

enum class State : uint8_t { runnable, at_barrier, at_collective, exited };

// A CUDA thread's state in the running block (its context lives in the thread's FiberPool).
struct Fiber {
  State state = State::runnable;
  uint3 tid{};
  int linear = 0;
  // The pending warp collective.
  detail::Collective op = detail::Collective::syncwarp;
  unsigned mask = 0;
  int arg = 0, width = 32;
  uint64_t in = 0, out = 0;
  uint32_t regs_in[11] = {}, regs_out[4] = {};  // ldmatrix / mma operands and results
  const char* where = "";
  // cp.async: copies issued and not yet committed, then committed groups, oldest first.
  struct Copy {
    unsigned char* dst;
    const unsigned char* src;
    int bytes, src_bytes;
  };
  std::vector<Copy> uncommitted;
  std::vector<std::vector<Copy>> groups;
};

// The fibers of an OS thread, reused by every block and launch it runs: fiber i runs thread i
// of each block in a loop (fiber_main), so a block costs no context set-up and, under ASan, no
// fake stack per thread (ASan maps one per fiber for its lifetime: per block, that was most of
// a kernel's time). A fiber left inside a kernel (the block failed) is started afresh.
struct FiberSlot {
  Context context;
  std::unique_ptr<char[]> stack;  // default-initialized: only touched pages are committed
  void* fake_stack = nullptr;     // ASan's, while the fiber is switched out
  bool idle = false;              // waiting at the end of fiber_main's loop for the next block
};
struct FiberPool {
  std::vector<std::unique_ptr<FiberSlot>> slots;  // stable addresses: a fiber holds its own
  size_t stack_bytes = 0;
  Context scheduler;
  const void* scheduler_stack = nullptr;  // the scheduler's stack bounds (for ASan)
  size_t scheduler_stack_bytes = 0;
};
thread_local FiberPool t_pool;

struct BlockRun {
  std::vector<Fiber> fibers;
  void* scheduler_fake_stack = nullptr;
  int current = -1;
  detail::Body body = nullptr;
  void* closure = nullptr;
  std::exception_ptr error;
};

thread_local BlockRun* t_block = nullptr;

std::mutex g_mutex;  // stats and the opt-in table
Stats g_stats;
std::unordered_map<const void*, size_t> g_dynamic_shared_opt_in;

Schedule schedule_from_environment() {
  Schedule s;
  if (const char* e = std::getenv("EMBER_SIM_LANES")) {
    const std::string v = e;
    if (v == "rev") s.lanes = LaneOrder::reverse;
    else if (v.rfind("rand", 0) == 0) {
      s.lanes = LaneOrder::random;
      if (v.size() > 5 && v[4] == ':') s.seed = std::strtoull(v.c_str() + 5, nullptr, 10);
    }
  }
  if (const char* e = std::getenv("EMBER_SIM_WARPS")) {
    const std::string v = e;
    if (v == "eager") s.warps = WarpPolicy::eager;
    else if (v == "eager-rev") s.warps = WarpPolicy::eager_reverse;
  }
  return s;
}
thread_local Schedule t_schedule = schedule_from_environment();

[[noreturn]] void fail(const std::string& what) {
  std::ostringstream m;
  m << "[cuda_sim] " << what << " (block (" << detail::t_block_idx.x << ", " << detail::t_block_idx.y << ", "
    << detail::t_block_idx.z << "))";
  throw SimError(m.str());
}

std::string describe(const BlockRun& b) {
  std::ostringstream s;
  for (const Fiber& f : b.fibers) {
    s << "\n  thread " << f.linear << " (warp " << f.linear / 32 << ", lane " << f.linear % 32 << "): ";
    switch (f.state) {
      case State::runnable: s << "runnable"; break;
      case State::at_barrier: s << "at __syncthreads"; break;
      case State::at_collective: s << "at " << f.where << " with mask 0x" << std::hex << f.mask << std::dec; break;
      case State::exited: s << "exited"; break;
    }
  }
  return s.str();
}

// Back to the scheduler; returns when the scheduler resumes this fiber.
void suspend() {
  BlockRun* b = t_block;
  if (b == nullptr) fail("a synchronization point outside a kernel");
  FiberSlot& slot = *t_pool.slots[size_t(b->current)];
  switch_starts(&slot.fake_stack, t_pool.scheduler_stack, t_pool.scheduler_stack_bytes);
  switch_context(slot.context, t_pool.scheduler);
  switch_done(slot.fake_stack);
}

// One fiber's life: thread `current` of every block it is resumed for, until the OS thread
// ends. Nothing with a destructor lives across the switch at the bottom of the loop.
void fiber_main() {
  switch_done(nullptr, &t_pool.scheduler_stack, &t_pool.scheduler_stack_bytes);
  for (;;) {
    BlockRun* b = t_block;
    try {
      b->body(b->closure);
      const Fiber& me = b->fibers[size_t(b->current)];
      if (!me.uncommitted.empty() || !me.groups.empty())
        fail("thread " + std::to_string(me.linear) + " exited with cp.async copies it never waited for");
    } catch (...) {
      b->error = std::current_exception();  // rethrown by the scheduler, on its own stack
    }
    b->fibers[size_t(b->current)].state = State::exited;
    FiberSlot& slot = *t_pool.slots[size_t(b->current)];
    slot.idle = true;
    switch_starts(&slot.fake_stack, t_pool.scheduler_stack, t_pool.scheduler_stack_bytes);
    switch_context(slot.context, t_pool.scheduler);
    switch_done(slot.fake_stack);
  }
}

// ---- tensor-core fragments (PTX ISA, "Matrix fragments for mma.m16n8k16", "ldmatrix")

float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  uint32_t bits;
  if (exp == 0x1f) bits = sign | 0x7f800000u | (man << 13);  // inf, NaN
  else if (exp != 0) bits = sign | ((exp + 112) << 23) | (man << 13);
  else if (man == 0) bits = sign;
  else {  // subnormal, man * 2^-24: shifted until the implicit bit (0x400) is set
    int shifts = 0;
    uint32_t m = man;
    while (!(m & 0x400)) m <<= 1, ++shifts;
    bits = sign | (uint32_t(113 - shifts) << 23) | ((m & 0x3ff) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
float b16_to_float(uint16_t v, bool bf16) {
  if (!bf16) return half_to_float(v);
  const uint32_t bits = uint32_t(v) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

void ldmatrix_resolve(Fiber* const (&lane)[32]) {
  const bool trans = lane[0]->regs_in[1] != 0;
  for (int l = 0; l < 32; ++l)
    if ((lane[l]->regs_in[1] != 0) != trans) fail("ldmatrix: lanes disagree on .trans");
  uint16_t m[4][8][8];  // matrix, row, column
  for (int mat = 0; mat < 4; ++mat)
    for (int r = 0; r < 8; ++r) {
      const uint32_t address = lane[mat * 8 + r]->regs_in[0];
      if (address % 16 != 0) fail("ldmatrix: row address " + std::to_string(address) + " is not 16-byte aligned");
      std::memcpy(m[mat][r], shared_pointer(address, 16), 16);
    }
  for (int l = 0; l < 32; ++l)
    for (int mat = 0; mat < 4; ++mat) {
      const int r = l / 4, c = 2 * (l % 4);
      const uint16_t lo = trans ? m[mat][c][r] : m[mat][r][c], hi = trans ? m[mat][c + 1][r] : m[mat][r][c + 1];
      lane[l]->regs_out[mat] = uint32_t(lo) | (uint32_t(hi) << 16);
    }
}

void mma_resolve(Fiber* const (&lane)[32]) {
  const bool bf16 = lane[0]->regs_in[10] != 0;
  for (int l = 0; l < 32; ++l)
    if ((lane[l]->regs_in[10] != 0) != bf16) fail("mma.sync: lanes disagree on the operand type");
  float a[16][16], b[16][8], c[16][8];
  auto lo = [](uint32_t r) { return uint16_t(r & 0xffff); };
  auto hi = [](uint32_t r) { return uint16_t(r >> 16); };
  for (int l = 0; l < 32; ++l) {
    const Fiber& f = *lane[l];
    const int g = l >> 2, t = l & 3;
    const uint32_t* ar = f.regs_in;  // a0..a3, b0, b1, c0..c3 (as bits), the type
    a[g][2 * t] = b16_to_float(lo(ar[0]), bf16), a[g][2 * t + 1] = b16_to_float(hi(ar[0]), bf16);
    a[g + 8][2 * t] = b16_to_float(lo(ar[1]), bf16), a[g + 8][2 * t + 1] = b16_to_float(hi(ar[1]), bf16);
    a[g][2 * t + 8] = b16_to_float(lo(ar[2]), bf16), a[g][2 * t + 9] = b16_to_float(hi(ar[2]), bf16);
    a[g + 8][2 * t + 8] = b16_to_float(lo(ar[3]), bf16), a[g + 8][2 * t + 9] = b16_to_float(hi(ar[3]), bf16);
    b[2 * t][g] = b16_to_float(lo(ar[4]), bf16), b[2 * t + 1][g] = b16_to_float(hi(ar[4]), bf16);
    b[2 * t + 8][g] = b16_to_float(lo(ar[5]), bf16), b[2 * t + 9][g] = b16_to_float(hi(ar[5]), bf16);
    float cv[4];
    std::memcpy(cv, ar + 6, 16);
    c[g][2 * t] = cv[0], c[g][2 * t + 1] = cv[1], c[g + 8][2 * t] = cv[2], c[g + 8][2 * t + 1] = cv[3];
  }
  for (int l = 0; l < 32; ++l) {
    const int g = l >> 2, t = l & 3;
    const int rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
    for (int i = 0; i < 4; ++i) {
      float d = c[rows[i]][cols[i]];
      for (int k = 0; k < 16; ++k) d += a[rows[i]][k] * b[k][cols[i]];  // exact products, f32 sums
      std::memcpy(&lane[l]->regs_out[i], &d, 4);
    }
  }
}

// The lanes of one warp named by `mask` all wait at a collective: check that it is one
// collective, compute every lane's result and make them runnable.
void release_collective(BlockRun& b, int warp, unsigned mask) {
  Fiber* lane[32] = {};
  for (int i = 0; i < 32; ++i)
    if (mask >> i & 1u) lane[i] = &b.fibers[size_t(warp * 32 + i)];
  const Fiber& first = *lane[__builtin_ctz(mask)];
  for (int i = 0; i < 32; ++i)
    if (lane[i] && (lane[i]->op != first.op || lane[i]->mask != mask || lane[i]->width != first.width))
      fail(std::string("warp ") + std::to_string(warp) + ": lane " + std::to_string(first.linear % 32) + " at " +
           first.where + " and lane " + std::to_string(i) + " at " + lane[i]->where +
           " meet at different collectives or masks" + describe(b));
  if (first.op == detail::Collective::ldmatrix || first.op == detail::Collective::mma) {
    if (mask != 0xffffffffu) fail(std::string(first.where) + " needs the whole warp (mask 0xffffffff)");
    if (first.op == detail::Collective::ldmatrix) ldmatrix_resolve(lane);
    else mma_resolve(lane);
    for (Fiber* f : lane) f->state = State::runnable;
    return;
  }
  uint64_t ballot = 0;
  for (int i = 0; i < 32; ++i)
    if (lane[i] && lane[i]->in) ballot |= uint64_t(1) << i;
  for (int i = 0; i < 32; ++i) {
    Fiber* f = lane[i];
    if (!f) continue;
    const int width = f->width, base = i & ~(width - 1);
    int src = i;
    switch (f->op) {
      case detail::Collective::syncwarp: break;
      case detail::Collective::shfl_idx: src = base + (f->arg & (width - 1)); break;
      case detail::Collective::shfl_up: src = i - base >= f->arg ? i - f->arg : i; break;
      case detail::Collective::shfl_down: src = i - base + f->arg < width ? i + f->arg : i; break;
      case detail::Collective::shfl_xor: src = (i ^ f->arg) < base + width ? i ^ f->arg : i; break;
      case detail::Collective::ballot: f->out = ballot; break;
      case detail::Collective::any: f->out = ballot != 0; break;
      case detail::Collective::all: f->out = ballot == mask; break;
      case detail::Collective::match_any: {
        uint64_t same = 0;
        for (int j = 0; j < 32; ++j)
          if (lane[j] && lane[j]->in == f->in) same |= uint64_t(1) << j;
        f->out = same;
        break;
      }
      case detail::Collective::ldmatrix:
      case detail::Collective::mma: break;  // resolved above
    }
    const bool shuffle = f->op == detail::Collective::shfl_idx || f->op == detail::Collective::shfl_up ||
                         f->op == detail::Collective::shfl_down || f->op == detail::Collective::shfl_xor;
    if (shuffle) {
      if (src < 0 || src > 31 || !lane[src])
        fail(std::string(f->where) + ": lane " + std::to_string(i) + " of warp " + std::to_string(warp) +
             " reads lane " + std::to_string(src) + ", which is not in the mask (undefined on the GPU)");
      f->out = lane[src]->in;
    }
  }
  for (Fiber* f : lane)
    if (f) f->state = State::runnable;
}

// Releases one complete collective of `warp`, if any; a mask naming an exited lane is an error.
bool release_one(BlockRun& b, int warp) {
  const int n = int(b.fibers.size());
  for (int i = 0; i < 32 && warp * 32 + i < n; ++i) {
    const Fiber& f = b.fibers[size_t(warp * 32 + i)];
    if (f.state != State::at_collective) continue;
    bool complete = true;
    for (int k = 0; k < 32; ++k) {
      if (!(f.mask >> k & 1u)) continue;
      if (warp * 32 + k >= n || b.fibers[size_t(warp * 32 + k)].state == State::exited)
        fail(std::string(f.where) + " in warp " + std::to_string(warp) + ": its mask names lane " + std::to_string(k) +
             ", which has exited or does not exist" + describe(b));
      if (b.fibers[size_t(warp * 32 + k)].state != State::at_collective) complete = false;
    }
    if (complete) {
      release_collective(b, warp, f.mask);
      return true;
    }
  }
  return false;
}

std::vector<int> lane_order(int n, const Schedule& s, uint64_t salt) {
  std::vector<int> order(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) order[size_t(i)] = i;
  if (s.lanes == LaneOrder::reverse) std::reverse(order.begin(), order.end());
  if (s.lanes == LaneOrder::random) {
    std::mt19937_64 rng(s.seed * 0x9E3779B97F4A7C15ull + salt);
    std::shuffle(order.begin(), order.end(), rng);
  }
  return order;
}

void run_block(BlockRun& b, int n, const Schedule& s, uint64_t block_linear) {
  b.fibers.assign(size_t(n), Fiber{});
  const dim3 bd = detail::t_block_dim;
  for (int i = 0; i < n; ++i) {
    Fiber& f = b.fibers[size_t(i)];
    f.linear = i;
    f.tid = uint3{unsigned(i) % bd.x, unsigned(i) / bd.x % bd.y, unsigned(i) / (bd.x * bd.y)};
    FiberSlot& slot = *t_pool.slots[size_t(i)];
    if (!slot.idle) {  // never started, or abandoned inside a kernel by a failed block
      make_context(slot.context, slot.stack.get(), t_pool.stack_bytes, fiber_main);
      slot.fake_stack = nullptr;
    }
    slot.idle = false;
  }
  const int warps = (n + 31) / 32;
  uint64_t round = 0;
  auto run_lanes = [&](int only_warp) {
    bool ran = false;
    for (int i : lane_order(n, s, block_linear * 0x100000001b3ull + round++)) {
      Fiber& f = b.fibers[size_t(i)];
      if (f.state != State::runnable || (only_warp >= 0 && i / 32 != only_warp)) continue;
      b.current = i;
      detail::t_thread_idx = f.tid;
      FiberSlot& slot = *t_pool.slots[size_t(i)];
      switch_starts(&b.scheduler_fake_stack, slot.stack.get(), t_pool.stack_bytes);
      switch_context(t_pool.scheduler, slot.context);
      switch_done(b.scheduler_fake_stack);
      if (b.error) std::rethrow_exception(std::exchange(b.error, nullptr));
      ran = true;
    }
    return ran;
  };
  for (;;) {
    bool progress = false;
    if (s.warps == WarpPolicy::lockstep) {
      progress = run_lanes(-1);
      for (int w = 0; w < warps; ++w) progress |= release_one(b, w);
    } else {  // one warp runs alone until it waits at the barrier or exits: maximal skew
      for (int k = 0; k < warps && !progress; ++k) {
        const int w = s.warps == WarpPolicy::eager ? k : warps - 1 - k;
        for (;;) {
          const bool ran = run_lanes(w), released = release_one(b, w);
          if (!ran && !released) break;
          progress = true;
        }
      }
    }
    int exited = 0, waiting = 0;
    for (const Fiber& f : b.fibers) {
      exited += f.state == State::exited;
      waiting += f.state == State::at_barrier;
    }
    if (exited == n) return;
    if (waiting > 0 && waiting + exited == n) {
      if (exited > 0)
        fail(std::to_string(exited) + " thread(s) exited before a __syncthreads the others wait at" + describe(b));
      for (Fiber& f : b.fibers) f.state = State::runnable;
      std::lock_guard<std::mutex> lock(g_mutex);
      ++g_stats.barriers;
      progress = true;
    }
    if (!progress) fail("deadlock: no thread can run" + describe(b));
  }
}

}  // namespace

Schedule schedule() { return t_schedule; }
void set_schedule(const Schedule& s) { t_schedule = s; }

void set_max_dynamic_shared_memory(const void* kernel, size_t bytes) {
  if (bytes > kMaxDynamicSharedOptIn)
    throw SimError("[cuda_sim] cudaFuncSetAttribute: " + std::to_string(bytes) +
                   " bytes of dynamic shared memory exceed the 227 KB an H100 block can have");
  std::lock_guard<std::mutex> lock(g_mutex);
  g_dynamic_shared_opt_in[kernel] = bytes;
}

Stats stats() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_stats;
}

namespace detail {

uint64_t warp_collective(Collective op, unsigned mask, uint64_t value, int arg, int width, const char* where) {
  BlockRun* b = t_block;
  if (b == nullptr) fail(std::string(where) + " outside a kernel");
  Fiber& f = b->fibers[size_t(b->current)];
  const int lane = f.linear % 32;
  if (!(mask >> lane & 1u))
    fail(std::string(where) + ": lane " + std::to_string(lane) + " of warp " + std::to_string(f.linear / 32) +
         " is not in its own mask 0x" + [&] {
           std::ostringstream h;
           h << std::hex << mask;
           return h.str();
         }());
  if (width < 1 || width > 32 || (width & (width - 1)) != 0)
    fail(std::string(where) + ": width " + std::to_string(width) + " is not a power of two in [1, 32]");
  f.op = op;
  f.mask = mask;
  f.in = value;
  f.arg = arg;
  f.width = width;
  f.where = where;
  f.state = State::at_collective;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    ++g_stats.warp_collectives;
  }
  suspend();
  t_thread_idx = f.tid;
  return f.out;
}

// A warp-wide matrix instruction: this lane's registers in, its result registers out.
void warp_registers(Collective op, const uint32_t* in, int n, uint32_t (&out)[4], const char* where) {
  BlockRun* b = t_block;
  if (b == nullptr) fail(std::string(where) + " outside a kernel");
  Fiber& f = b->fibers[size_t(b->current)];
  std::copy(in, in + n, f.regs_in);
  f.op = op;
  f.mask = 0xffffffffu;
  f.width = 32;
  f.where = where;
  f.state = State::at_collective;
  suspend();
  t_thread_idx = f.tid;
  std::copy(std::begin(f.regs_out), std::end(f.regs_out), out);
}

void sync_threads(const char* where) {
  BlockRun* b = t_block;
  if (b == nullptr) fail(std::string(where) + " outside a kernel");
  Fiber& f = b->fibers[size_t(b->current)];
  f.state = State::at_barrier;
  f.where = where;
  suspend();
  t_thread_idx = f.tid;
}

namespace {
SubmitHook g_submit_hook = nullptr;
}  // namespace

void set_submit_hook(SubmitHook hook) { g_submit_hook = hook; }

void submit(cudaStream_t stream, std::function<void()> work) {
  if (g_submit_hook != nullptr && g_submit_hook(stream, work)) return;
  work();
}

void check_launch(const void* kernel, dim3 grid, dim3 block, size_t dynamic_shared, size_t parameter_bytes) {
  if (t_block != nullptr) fail("a kernel launched from inside a kernel (dynamic parallelism is not simulated)");
  const uint64_t threads = uint64_t(block.x) * block.y * block.z;
  if (threads == 0 || threads > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64)
    throw LaunchError(cudaErrorInvalidConfiguration,
                      "[cuda_sim] invalid configuration argument: block (" + std::to_string(block.x) + ", " +
                          std::to_string(block.y) + ", " + std::to_string(block.z) +
                          ") (at most 1024 threads; x, y <= 1024, z <= 64)");
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535)
    throw LaunchError(cudaErrorInvalidConfiguration,
                      "[cuda_sim] invalid configuration argument: grid (" + std::to_string(grid.x) + ", " +
                          std::to_string(grid.y) + ", " + std::to_string(grid.z) +
                          ") (each > 0; x < 2^31, y and z <= 65535)");
  size_t limit = kDefaultDynamicSharedLimit;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (auto it = g_dynamic_shared_opt_in.find(kernel); it != g_dynamic_shared_opt_in.end()) limit = it->second;
  }
  if (dynamic_shared > limit)
    throw LaunchError(cudaErrorInvalidValue,
                      "[cuda_sim] invalid argument: " + std::to_string(dynamic_shared) +
                          " bytes of dynamic shared memory, above the kernel's limit of " + std::to_string(limit) +
                          (limit == kDefaultDynamicSharedLimit ? " (48 KB without cudaFuncSetAttribute's opt-in)" : ""));
  if (parameter_bytes > kMaxParameterBytes)
    throw LaunchError(cudaErrorLaunchOutOfResources,
                      "[cuda_sim] too many resources requested for launch: " + std::to_string(parameter_bytes) +
                          " bytes of kernel parameters (at most 32764)");
}

void run_grid(dim3 grid, dim3 block, size_t dynamic_shared, Body body, void* closure) {
  const uint64_t threads = uint64_t(block.x) * block.y * block.z;

  const size_t stack_bytes = [] {
    const char* e = std::getenv("EMBER_SIM_STACK_KB");
    return size_t(e ? std::max(16, std::atoi(e)) : 256) * 1024;
  }();
  if (t_pool.stack_bytes != stack_bytes) t_pool.slots.clear(), t_pool.stack_bytes = stack_bytes;
  while (t_pool.slots.size() < threads) {
    t_pool.slots.push_back(std::make_unique<FiberSlot>());
    t_pool.slots.back()->stack.reset(new char[stack_bytes]);
  }
  std::vector<unsigned char> shared(std::max<size_t>(dynamic_shared, 1));
  const Schedule s = t_schedule;
  BlockRun b;
  b.body = body;
  b.closure = closure;
  t_block = &b;
  t_block_dim = block;
  t_grid_dim = grid;
  t_dynamic_shared = shared.data();
  t_dynamic_shared_bytes = dynamic_shared;
  struct Reset {
    ~Reset() {
      t_block = nullptr;
      t_dynamic_shared = nullptr;
      t_dynamic_shared_bytes = 0;
    }
  } reset;
  uint64_t block_linear = 0;
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x, ++block_linear) {
        t_block_idx = uint3{x, y, z};
        std::fill(shared.begin(), shared.end(), 0xFF);  // NaN in every float type: reads before writes show
        run_block(b, int(threads), s, block_linear);
      }
  std::lock_guard<std::mutex> lock(g_mutex);
  ++g_stats.launches;
  g_stats.blocks += block_linear;
  g_stats.threads += block_linear * threads;
}

}  // namespace detail

uint32_t shared_address(const void* p) {
  const auto* base = detail::t_dynamic_shared;
  const auto* q = static_cast<const unsigned char*>(p);
  if (base == nullptr || q < base || q >= base + detail::t_dynamic_shared_bytes)
    fail("a shared-memory address outside the block's dynamic shared memory");
  return uint32_t(q - base);
}

void* shared_pointer(uint32_t address, size_t bytes) {
  if (detail::t_dynamic_shared == nullptr || size_t(address) + bytes > detail::t_dynamic_shared_bytes)
    fail("shared address " + std::to_string(address) + " + " + std::to_string(bytes) +
         " bytes is beyond the block's " + std::to_string(detail::t_dynamic_shared_bytes) + " bytes");
  return detail::t_dynamic_shared + address;
}

void cp_async(uint32_t dst, const void* src, int bytes, int src_bytes) {
  BlockRun* b = t_block;
  if (b == nullptr) fail("cp.async outside a kernel");
  if (dst % unsigned(bytes) != 0) fail("cp.async: destination " + std::to_string(dst) + " is not aligned");
  auto* d = static_cast<unsigned char*>(shared_pointer(dst, size_t(bytes)));
  std::memset(d, 0xFF, size_t(bytes));  // NaN until the wait completes the copy
  b->fibers[size_t(b->current)].uncommitted.push_back({d, static_cast<const unsigned char*>(src), bytes, src_bytes});
}

void cp_async_commit() {
  BlockRun* b = t_block;
  if (b == nullptr) fail("cp.async.commit_group outside a kernel");
  Fiber& f = b->fibers[size_t(b->current)];
  f.groups.push_back(std::move(f.uncommitted));
  f.uncommitted.clear();
}

void cp_async_wait(int pending_groups_allowed) {
  BlockRun* b = t_block;
  if (b == nullptr) fail("cp.async.wait_group outside a kernel");
  Fiber& f = b->fibers[size_t(b->current)];
  while (int(f.groups.size()) > pending_groups_allowed) {
    for (const auto& c : f.groups.front()) {
      std::memcpy(c.dst, c.src, size_t(c.src_bytes));
      std::memset(c.dst + c.src_bytes, 0, size_t(c.bytes - c.src_bytes));
    }
    f.groups.erase(f.groups.begin());
  }
}

void ldmatrix_x4(uint32_t (&r)[4], uint32_t address, bool trans) {
  const uint32_t in[2] = {address, trans ? 1u : 0u};
  detail::warp_registers(detail::Collective::ldmatrix, in, 2, r, trans ? "ldmatrix.x4.trans" : "ldmatrix.x4");
}

void mma_m16n8k16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, bool bf16) {
  uint32_t in[11] = {a[0], a[1], a[2], a[3], b0, b1, 0, 0, 0, 0, bf16 ? 1u : 0u};
  std::memcpy(in + 6, c, 16);
  uint32_t out[4];
  detail::warp_registers(detail::Collective::mma, in, 11, out, "mma.sync.m16n8k16");
  std::memcpy(c, out, 16);
}

float ex2_approx_ftz(float x) {
  const float y = std::exp2(x);
  return std::fpclassify(y) == FP_SUBNORMAL ? 0.0f : y;
}

}  // namespace ember::cuda::sim
