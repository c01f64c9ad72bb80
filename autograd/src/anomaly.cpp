// Anomaly detection: forward-site capture and the non-finite gradient check.
//
// Capture is backtrace(3) alone (return addresses, no symbol lookup): a few hundred ns per
// recorded node, paid only under a detect_anomaly guard. Names are looked up only when an
// error is reported, from the executable's own ELF symbol table (ember's libraries are static
// and executables are not linked with -rdynamic, so dladdr alone would not see the caller's
// function names), falling back to dladdr for code in shared libraries.
#include "ember/autograd/anomaly.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <elf.h>
#include <execinfo.h>
#include <fcntl.h>
#include <link.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>
#include <vector>

#include "ember/grad_mode.h"
#include "ember/ops/elementwise.h"
#include "ember/ops/reduce.h"

namespace ember::autograd {

namespace detail {
EMBER_HOT_TLS constinit thread_local bool anomaly_enabled = false;
}

namespace {

std::string demangle(const char* name) {
  int status = 0;
  char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string out = (status == 0 && d) ? d : name;
  std::free(d);
  return out;
}

// The main executable's function symbols (from .symtab), sorted by address, and its load bias.
struct ExeSymbols {
  struct Sym {
    uintptr_t begin, end;
    std::string name;
  };
  std::vector<Sym> syms;
  uintptr_t bias = 0;

  ExeSymbols() {
    dl_iterate_phdr(
        [](dl_phdr_info* info, size_t, void* self) {
          static_cast<ExeSymbols*>(self)->bias = info->dlpi_addr;
          return 1;  // the first entry is the main program
        },
        this);
    int fd = ::open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    struct stat st {};
    if (fstat(fd, &st) != 0 || size_t(st.st_size) < sizeof(Elf64_Ehdr)) {
      ::close(fd);
      return;
    }
    const size_t size = size_t(st.st_size);
    void* map = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (map == MAP_FAILED) return;
    const auto* base = static_cast<const unsigned char*>(map);
    const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(base);
    auto in_file = [&](uint64_t off, uint64_t len) { return off <= size && len <= size - off; };
    if (std::memcmp(eh->e_ident, ELFMAG, SELFMAG) == 0 && eh->e_ident[EI_CLASS] == ELFCLASS64 &&
        eh->e_shentsize == sizeof(Elf64_Shdr) &&
        in_file(eh->e_shoff, uint64_t(eh->e_shnum) * sizeof(Elf64_Shdr))) {
      const auto* sh = reinterpret_cast<const Elf64_Shdr*>(base + eh->e_shoff);
      for (int i = 0; i < eh->e_shnum; ++i) {
        if (sh[i].sh_type != SHT_SYMTAB || sh[i].sh_link >= eh->e_shnum) continue;
        const Elf64_Shdr& strtab = sh[sh[i].sh_link];
        if (!in_file(sh[i].sh_offset, sh[i].sh_size) || !in_file(strtab.sh_offset, strtab.sh_size))
          continue;
        const auto* sym = reinterpret_cast<const Elf64_Sym*>(base + sh[i].sh_offset);
        const size_t n = sh[i].sh_size / sizeof(Elf64_Sym);
        const char* strs = reinterpret_cast<const char*>(base + strtab.sh_offset);
        for (size_t k = 0; k < n; ++k) {
          if (ELF64_ST_TYPE(sym[k].st_info) != STT_FUNC || sym[k].st_value == 0 ||
              sym[k].st_name >= strtab.sh_size)
            continue;
          const char* nm = strs + sym[k].st_name;
          if (!memchr(nm, '\0', strtab.sh_size - sym[k].st_name)) continue;
          syms.push_back({uintptr_t(sym[k].st_value), uintptr_t(sym[k].st_value + std::max<uint64_t>(sym[k].st_size, 1)), nm});
        }
      }
    }
    munmap(map, size);
    std::sort(syms.begin(), syms.end(), [](const Sym& a, const Sym& b) { return a.begin < b.begin; });
  }

  const char* find(uintptr_t addr) const {
    const uintptr_t a = addr - bias;
    auto it = std::upper_bound(syms.begin(), syms.end(), a,
                               [](uintptr_t v, const Sym& s) { return v < s.begin; });
    if (it == syms.begin()) return nullptr;
    --it;
    return a < it->end ? it->name.c_str() : nullptr;
  }
};

std::string symbolize(void* frame) {
  static const ExeSymbols exe;  // built on the first report only
  // A return address points just past its call; look up the call itself.
  const uintptr_t addr = reinterpret_cast<uintptr_t>(frame) - 1;
  if (const char* name = exe.find(addr)) return demangle(name);
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(addr), &info) && info.dli_sname) return demangle(info.dli_sname);
  std::ostringstream s;
  s << frame;
  if (info.dli_fname) s << " in " << info.dli_fname;
  return s.str();
}

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

}  // namespace

namespace detail {

std::unique_ptr<ForwardSite> capture_forward_site() {
  auto site = std::make_unique<ForwardSite>();
  site->count = backtrace(site->frames, ForwardSite::kMaxFrames);
  return site;
}

std::string format_forward_site(const ForwardSite& site) {
  constexpr int kShown = 12;
  std::ostringstream out;
  int shown = 0;
  for (int i = 0; i < site.count && shown < kShown; ++i) {
    const std::string name = symbolize(site.frames[i]);
    // The recording machinery itself (capture, attach, record<...>) says nothing to a user.
    if (starts_with(name, "ember::autograd::detail::") || starts_with(name, "ember::autograd::record<") ||
        name.find("ember::autograd::record<") != std::string::npos)
      continue;
    // Below the user's code: test runners and the C runtime.
    if (starts_with(name, "testing::") || starts_with(name, "void testing::") ||
        starts_with(name, "__libc_start") || name == "_start")
      break;
    out << "\n    #" << shown++ << " " << name;
    if (name == "main") break;
  }
  return out.str();
}

void check_gradients(const Node& node, const TensorList& grads) {
  NoGradGuard no_grad;
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor& g = grads[i];
    if (!g.defined() || g.numel() == 0 || !is_floating(g.dtype())) continue;
    // g - g is 0 where g is finite and NaN where it is NaN or inf, and summing zeros cannot
    // overflow: one elementwise pass and one reduction, read back once.
    const Tensor probe = ops::reduce(ops::ReduceOp::sum, ops::binary(ops::BinaryOp::sub, g, g), {}, false);
    if (!std::isnan(ops::to(probe, Device::cpu(), DType::f64).item<double>())) continue;
    auto count = [](const Tensor& mask) {
      return ops::to(ops::reduce(ops::ReduceOp::sum, mask, {}, false), Device::cpu(), DType::i64).item<int64_t>();
    };
    const Tensor d = ops::binary(ops::BinaryOp::sub, g, g);
    const int64_t nans = count(ops::binary(ops::BinaryOp::ne, g, g));
    const int64_t infs = g.numel() - count(ops::binary(ops::BinaryOp::eq, d, d)) - nans;
    std::string msg = str("[detect_anomaly] the backward of '", node.name(),
                          "' returned a non-finite gradient for its input ", uint64_t(i), " (shape ",
                          g.sizes(), ", ", dtype_name(g.dtype()), ": ", nans, " NaN and ", infs, " inf of ",
                          g.numel(), " elements)");
    if (node.forward_site)
      msg += str("; the forward of '", node.name(), "' was called from:", format_forward_site(*node.forward_site));
    else
      msg += "; its forward was recorded outside a detect_anomaly guard, so its call site is unknown";
    throw AutogradError(msg);
  }
}

}  // namespace detail
}  // namespace ember::autograd
