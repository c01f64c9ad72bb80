// CUDA libraries opened on first use: Note [vendor libraries] in ember/cuda/vendor_library.h.
#include "ember/cuda/vendor_library.h"

#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <filesystem>
#include <utility>

#include "ember/error.h"

namespace ember::cuda {

namespace {
// The directory of the file holding this function: libember_core.so's in a shared build (where
// an install bundles the libraries), the program's in a static one.
std::string ember_library_dir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&ember_library_dir), &info) == 0 || info.dli_fname == nullptr)
    return {};
  std::error_code ec;
  const auto path = std::filesystem::canonical(info.dli_fname, ec);
  return ec ? std::string() : path.parent_path().string();
}

std::string last_dl_error() {
  const char* e = dlerror();
  return e ? e : "unknown error";
}
}  // namespace

VendorLibrary::VendorLibrary(std::string display_name, std::string soname,
                             std::vector<std::string> build_dirs)
    : display_name_(std::move(display_name)),
      soname_(std::move(soname)),
      build_dirs_(std::move(build_dirs)) {}

#ifdef EMBER_CUDA_SIM_RUNTIME_LIBRARY
VendorLibrary::VendorLibrary(EmbersOwn, std::string display_name, std::string, std::string)
    : VendorLibrary(std::move(display_name) + " (simulated)", EMBER_CUDA_SIM_RUNTIME_LIBRARY, {}) {}
#else
VendorLibrary::VendorLibrary(EmbersOwn, std::string display_name, std::string soname,
                             std::string build_dir)
    : VendorLibrary(std::move(display_name), std::move(soname), {std::move(build_dir)}) {}
#endif

void VendorLibrary::open() {
  std::vector<std::string> tried;  // "where: why not", for the message
  auto try_path = [&](const std::string& path) {
    handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle_) tried.push_back(last_dl_error());
    return handle_ != nullptr;
  };
  // In a directory the file is opened only if it is there (dlopen's message for a missing path
  // would bury the useful one); one that is there and fails to load keeps the loader's reason
  // (a missing dependency, a wrong architecture).
  auto try_dir = [&](const std::string& dir) {
    if (dir.empty()) return false;
    const std::string path = (std::filesystem::path(dir) / soname_).string();
    if (access(path.c_str(), F_OK) != 0) {
      tried.push_back(path + ": not there");
      return false;
    }
    return try_path(path);
  };
  bool ok = try_dir(ember_library_dir()) || try_path(soname_);
  for (size_t i = 0; !ok && i < build_dirs_.size(); ++i) ok = try_dir(build_dirs_[i]);
  if (ok) {
    link_map* map = nullptr;
    location_ = dlinfo(handle_, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name && *map->l_name
                    ? map->l_name
                    : soname_;
    return;
  }
  location_ = str(display_name_, " (", soname_, ") could not be loaded; tried:");
  for (const auto& t : tried) location_ += str("\n  ", t);
}

bool VendorLibrary::available() {
  std::call_once(opened_, [this] { open(); });
  return handle_ != nullptr;
}

void* VendorLibrary::symbol(const char* name) {
  EMBER_CHECK(available(), DeviceError, "[cuda] ", location_,
              "\nInstall ", display_name_, " (", soname_,
              ") or add the directory holding it to LD_LIBRARY_PATH.");
  dlerror();  // clear a stale message
  void* address = dlsym(handle_, name);
  EMBER_CHECK(address != nullptr, DeviceError, "[cuda] ", name, " not found in ", display_name_,
              " (", location_, "): ", last_dl_error(),
              "; this ember was built against a newer version");
  return address;
}

}  // namespace ember::cuda
