// The MPI backend: MPI lifetime and the process group for CPU tensors.
//
// Invariants:
// - Only the group's worker thread calls MPI on the group's communicator (a duplicate of
//   MPI_COMM_WORLD), in the order collectives were issued, so an async collective overlaps the
//   caller's computation (DDP's backward) and MPI_THREAD_SERIALIZED would suffice. The main
//   thread uses MPI_COMM_WORLD only for init, the NCCL id broadcast, finalize and abort
//   (MPI_Abort only under MPI_THREAD_MULTIPLE: abort() may come from any thread, see
//   mpi_abort()).
// - f16/bf16 reductions convert to f32, reduce, and round once (correctness over bandwidth).
// - avg = sum, then a division by the group size in the reduction's compute type.
// - Counts above INT_MAX: all_reduce and broadcast go in chunks; all_gather and reduce_scatter
//   refuse with a clear error.
#include <atomic>
#include <climits>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "../src/backends.h"
#include "mpi_check.h"

namespace ember::distributed::detail {

namespace {
int world_rank_or_minus_one() {
  int initialized = 0, finalized = 0, r = -1;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
}  // namespace

void throw_mpi_error(const char* call, int code, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) len = 0;
  throw DistributedError(str("[mpi] ", call, " failed on rank ", world_rank_or_minus_one(), ": ",
                             std::string(text, size_t(len)), " (error ", code, ") at ", file, ":",
                             line));
}

bool mpi_built() { return true; }

namespace {
// The thread level MPI provides (MPI_Init_thread's answer, or MPI_Query_thread's when the
// program initialized MPI itself); mpi_abort() reads it from any thread.
std::atomic<int> g_thread_level{MPI_THREAD_SINGLE};
}  // namespace

void mpi_init(int& rank, int& size) {
  int initialized = 0;
  EMBER_MPI_CHECK(MPI_Initialized(&initialized));
  int provided = 0;
  if (!initialized) {
    EMBER_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided));
    EMBER_CHECK(provided >= MPI_THREAD_SERIALIZED, distributed::DistributedError,
                "[distributed.init] this MPI provides thread level ", provided,
                " but ember needs at least MPI_THREAD_SERIALIZED (", int(MPI_THREAD_SERIALIZED), ")");
  } else {
    EMBER_MPI_CHECK(MPI_Query_thread(&provided));
  }
  g_thread_level = provided;
  EMBER_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  EMBER_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  EMBER_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
}

bool mpi_running() {
  int initialized = 0, finalized = 0;
  if (MPI_Initialized(&initialized) != MPI_SUCCESS || MPI_Finalized(&finalized) != MPI_SUCCESS)
    return false;
  return initialized && !finalized;
}

void mpi_finalize() {
  if (mpi_running()) EMBER_MPI_CHECK(MPI_Finalize());
}

// Below MPI_THREAD_MULTIPLE, MPI_Abort from a thread other than the one inside MPI (the NCCL
// watchdog, while the MPI group's worker waits in a collective) is undefined; the caller's
// std::_Exit ends this rank instead, and mpirun ends the job (backends.h).
void mpi_abort(int code) noexcept {
  if (g_thread_level >= MPI_THREAD_MULTIPLE && mpi_running()) MPI_Abort(MPI_COMM_WORLD, code);
}

void mpi_broadcast_bytes(void* data, size_t nbytes, int root) {
  EMBER_CHECK(nbytes <= size_t(INT_MAX), distributed::DistributedError, "[mpi] broadcast of ", nbytes, " bytes");
  EMBER_MPI_CHECK(MPI_Bcast(data, int(nbytes), MPI_BYTE, root, MPI_COMM_WORLD));
}

namespace {

// ---- Work: completion shared between the worker thread and the caller ----
struct MpiWorkState {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;
};

class MpiWork final : public Work {
 public:
  MpiWork(std::shared_ptr<MpiWorkState> s, const char* op, int rank,
          std::chrono::milliseconds timeout)
      : s_(std::move(s)), op_(op), rank_(rank), timeout_(timeout) {}
  void wait() override {
    std::unique_lock lock(s_->mu);
    if (!s_->cv.wait_for(lock, timeout_, [&] { return s_->done; }))
      throw DistributedError(str("[", op_, "] rank ", rank_, ": timed out after ",
                                 double(timeout_.count()) / 1000.0,
                                 " s (another rank failed, or did not issue the same collectives "
                                 "in the same order)"));
    if (s_->error) std::rethrow_exception(s_->error);
  }
  bool is_completed() override {
    std::lock_guard lock(s_->mu);
    return s_->done;
  }

 private:
  std::shared_ptr<MpiWorkState> s_;
  const char* op_;
  int rank_;
  std::chrono::milliseconds timeout_;
};

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    case DType::u8: return MPI_UINT8_T;
    default: return MPI_DATATYPE_NULL;  // f16/bf16 go through f32; b8 moves as bytes
  }
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::max: return MPI_MAX;
    case ReduceOp::min: return MPI_MIN;
    default: return MPI_SUM;  // avg divides afterwards
  }
}

bool is_16bit(DType t) { return t == DType::f16 || t == DType::bf16; }

// f16/bf16 <-> f32 staging for reductions.
std::vector<float> widen(const Tensor& t) {
  std::vector<float> out(size_t(t.numel()));
  visit_dtype(t.dtype(), [&](auto v) {
    using T = decltype(v);
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      const T* p = static_cast<const T*>(t.data_ptr());
      for (size_t i = 0; i < out.size(); ++i) out[i] = float(p[i]);
    }
  });
  return out;
}
void narrow_into(const Tensor& t, const std::vector<float>& v) {
  visit_dtype(t.dtype(), [&](auto x) {
    using T = decltype(x);
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      T* p = static_cast<T*>(t.data_ptr());
      for (size_t i = 0; i < v.size(); ++i) p[i] = T(v[i]);
    }
  });
}

// Divides n values of dtype t at ptr by d (integers truncate, as NCCL's avg).
void divide(void* ptr, DType t, int64_t n, int d) {
  auto run = [&](auto* p) {
    for (int64_t i = 0; i < n; ++i) p[i] = std::remove_reference_t<decltype(p[0])>(p[i] / d);
  };
  switch (t) {
    case DType::f32: run(static_cast<float*>(ptr)); break;
    case DType::f64: run(static_cast<double*>(ptr)); break;
    case DType::i32: run(static_cast<int32_t*>(ptr)); break;
    case DType::i64: run(static_cast<int64_t*>(ptr)); break;
    default: break;
  }
}

int checked_count(const char* op, int64_t n, int rank) {
  EMBER_CHECK(n <= INT_MAX, distributed::DistributedError, "[", op, "] rank ", rank, ": ", n,
              " elements exceed MPI's int count; split the tensor");
  return int(n);
}

class MpiProcessGroup final : public ProcessGroup {
 public:
  MpiProcessGroup(int rank, int size) : ProcessGroup(rank, size) {
    EMBER_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm_));
    EMBER_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
    worker_ = std::thread([this] { run(); });
  }
  // A subgroup: takes ownership of `comm` (from MPI_Comm_split).
  MpiProcessGroup(int rank, int size, MPI_Comm comm) : ProcessGroup(rank, size), comm_(comm) {
    EMBER_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
    worker_ = std::thread([this] { run(); });
  }
  ~MpiProcessGroup() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
    if (mpi_running()) MPI_Comm_free(&comm_);  // a failure here cannot be reported usefully
  }
  const char* backend() const override { return "mpi"; }
  Device device() const override { return Device::cpu(); }

 protected:
  WorkPtr do_all_reduce(const Tensor& t, ReduceOp op) override {
    return enqueue("all_reduce", [this, t, op] {
      const int64_t n = t.numel();
      if (is_16bit(t.dtype())) {
        std::vector<float> v = widen(t);
        all_reduce_chunks(v.data(), MPI_FLOAT, n, op);
        if (op == ReduceOp::avg) divide(v.data(), DType::f32, n, size());
        narrow_into(t, v);
      } else {
        all_reduce_chunks(t.data_ptr(), mpi_type(t.dtype()), n, op);
        if (op == ReduceOp::avg) divide(t.data_ptr(), t.dtype(), n, size());
      }
    });
  }
  WorkPtr do_broadcast(const Tensor& t, int root) override {
    return enqueue("broadcast", [this, t, root] {
      char* p = static_cast<char*>(t.data_ptr());
      int64_t left = t.numel() * int64_t(t.element_size());
      while (left > 0) {
        const int n = int(std::min<int64_t>(left, 1 << 30));
        EMBER_MPI_CHECK(MPI_Bcast(p, n, MPI_BYTE, root, comm_));
        p += n;
        left -= n;
      }
    });
  }
  WorkPtr do_all_gather(const Tensor& output, const Tensor& input) override {
    return enqueue("all_gather", [this, output, input] {
      const int nbytes = checked_count("all_gather", input.numel() * int64_t(input.element_size()), rank());
      char* out = static_cast<char*>(output.data_ptr());
      const void* in = input.data_ptr();
      if (in == out + int64_t(rank()) * nbytes) in = MPI_IN_PLACE;  // input is this rank's slot
      EMBER_MPI_CHECK(MPI_Allgather(in, nbytes, MPI_BYTE, out, nbytes, MPI_BYTE, comm_));
    });
  }
  WorkPtr do_reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) override {
    return enqueue("reduce_scatter", [this, output, input, op] {
      const int n = checked_count("reduce_scatter", output.numel(), rank());
      if (is_16bit(input.dtype())) {
        std::vector<float> in = widen(input);
        std::vector<float> out(static_cast<size_t>(n));
        EMBER_MPI_CHECK(MPI_Reduce_scatter_block(in.data(), out.data(), n, MPI_FLOAT, mpi_op(op), comm_));
        if (op == ReduceOp::avg) divide(out.data(), DType::f32, n, size());
        narrow_into(output, out);
      } else {
        EMBER_MPI_CHECK(MPI_Reduce_scatter_block(input.data_ptr(), output.data_ptr(), n,
                                                 mpi_type(input.dtype()), mpi_op(op), comm_));
        if (op == ReduceOp::avg) divide(output.data_ptr(), output.dtype(), n, size());
      }
    });
  }
  void do_barrier() override {
    enqueue("barrier", [this] { EMBER_MPI_CHECK(MPI_Barrier(comm_)); })->wait();
  }
  // MPI_Comm_split on this group's worker (in order with its collectives). Each group's worker
  // calls MPI on its own communicator concurrently with the others: MPI_THREAD_MULTIPLE.
  std::shared_ptr<ProcessGroup> do_split(int color, int key, int new_rank, int new_size) override {
    EMBER_CHECK(g_thread_level >= MPI_THREAD_MULTIPLE, distributed::DistributedError, where("split"),
                ": subgroups need an MPI with MPI_THREAD_MULTIPLE (each group's collectives run on a "
                "thread of their own); this one provides thread level ", g_thread_level.load());
    MPI_Comm sub = MPI_COMM_NULL;
    enqueue("split", [this, color, key, &sub] {
      EMBER_MPI_CHECK(MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &sub));
    })->wait();
    if (sub == MPI_COMM_NULL) return nullptr;
    int r = -1, n = 0;
    EMBER_MPI_CHECK(MPI_Comm_rank(sub, &r));
    EMBER_MPI_CHECK(MPI_Comm_size(sub, &n));
    if (r != new_rank || n != new_size) {
      MPI_Comm_free(&sub);
      throw DistributedError(str(where("split"), ": MPI_Comm_split made rank ", r, " of ", n,
                                 " where the gathered colors and keys give rank ", new_rank, " of ", new_size));
    }
    return std::make_shared<MpiProcessGroup>(r, n, sub);
  }

 private:
  void all_reduce_chunks(void* data, MPI_Datatype type, int64_t n, ReduceOp op) {
    int size_bytes = 0;
    EMBER_MPI_CHECK(MPI_Type_size(type, &size_bytes));
    char* p = static_cast<char*>(data);
    while (n > 0) {
      const int c = int(std::min<int64_t>(n, 1 << 28));
      EMBER_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, p, c, type, mpi_op(op), comm_));
      p += int64_t(c) * size_bytes;
      n -= c;
    }
  }

  WorkPtr enqueue(const char* op, std::function<void()> fn) {
    auto state = std::make_shared<MpiWorkState>();
    {
      std::lock_guard lock(mu_);
      queue_.push_back([state, fn = std::move(fn)] {
        std::exception_ptr error;
        try {
          fn();
        } catch (...) {
          error = std::current_exception();
        }
        {
          std::lock_guard l(state->mu);
          state->done = true;
          state->error = error;
        }
        state->cv.notify_all();
      });
    }
    cv_.notify_one();
    return std::make_shared<MpiWork>(state, op, rank(), timeout());
  }

  void run() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stop_ and nothing left
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task();
    }
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace

std::shared_ptr<ProcessGroup> make_mpi_group(int rank, int size) {
  return std::make_shared<MpiProcessGroup>(rank, size);
}

}  // namespace ember::distributed::detail
