// CUDA libraries opened on first use (Note [vendor libraries]). Only code in core/cuda,
// ops/cuda, distributed/nccl, tools/cuda and tests/cuda includes this header.
//
// Note [vendor libraries]: ember's libraries link the CUDA runtime (libcudart, 0.7 MB, shipped
// beside them by `cmake --install`, and loadable without a driver or a GPU) but not cuBLASLt,
// cuDNN or NCCL (0.5, 0.5 and 0.2 GB). Those are opened with dlopen when a CUDA matmul, a
// convolution or a collective first needs them, so a program that only uses the CPU runs
// against a CUDA build of ember on a machine without the CUDA toolkit (issue 44), and a
// program that lacks one library gets an error naming it and where it was looked for, at the
// call that needed it, instead of a loader failure at start-up.
//
// The calls themselves are unchanged: the folder that uses a library defines each function it
// calls with the header's own signature (EMBER_VENDOR_FORWARD below; a signature that drifts
// from the header does not compile), resolving the real one on its first call. The forwarders
// are private to ember's libraries (cmake/ember_exports.map), so they never shadow a library
// the program itself links.
//
// Where a library is looked for, first match wins: the directory holding libember_core (an
// install that bundles the libraries, as LibTorch's does), then the dynamic loader's own search
// (LD_LIBRARY_PATH, the system's library path), then the directories the build found it in.
#pragma once

#include <mutex>
#include <string>
#include <vector>

namespace ember::cuda {

class VendorLibrary {
 public:
  // `display_name` names the library in messages ("cuDNN"); `soname` is the file the dynamic
  // loader knows it by ("libcudnn.so.9"); `build_dirs` are where the build found it.
  VendorLibrary(std::string display_name, std::string soname, std::vector<std::string> build_dirs);
  // One of the libraries ember's CUDA side calls: as above, looked for also in `build_dir`; in a
  // simulation build instead the simulation's runtime library, which implements all of them
  // (core/cuda_sim) and which ember_core links, so opening it finds the copy already loaded.
  struct EmbersOwn {};
  VendorLibrary(EmbersOwn, std::string display_name, std::string soname, std::string build_dir);
  VendorLibrary(const VendorLibrary&) = delete;
  VendorLibrary& operator=(const VendorLibrary&) = delete;

  // Opens the library (once; later calls return the first answer) and says whether it could.
  bool available();
  // The address of `name` in the library; throws DeviceError naming the library, the places it
  // was looked for and the loader's reason when it cannot be opened, or the function when the
  // library lacks it (an older version than the headers ember was built with).
  void* symbol(const char* name);
  // Where the library was loaded from, or why it could not be ("" before available()).
  const std::string& location() const { return location_; }
  const std::string& display_name() const { return display_name_; }
  const std::string& soname() const { return soname_; }

 private:
  void open();

  std::string display_name_, soname_;
  std::vector<std::string> build_dirs_;
  std::once_flag opened_;
  void* handle_ = nullptr;
  std::string location_;  // the path loaded, or the reason it could not be
};

namespace detail {
// A function type's result (the forwarder's return type, read off the header's declaration).
template <class F>
struct vendor_result;
template <class R, class... Args>
struct vendor_result<R(Args...)> {
  using type = R;
};
template <class R, class... Args>
struct vendor_result<R(Args...) noexcept> {
  using type = R;
};
}  // namespace detail

}  // namespace ember::cuda

// Defines the library function `name` (declared by its header, C linkage) as a call of the
// real one in `library()` (a VendorLibrary&), looked up on the first call. `params` is the
// parenthesized parameter list as the header declares it, `args` the names passed on.
#define EMBER_VENDOR_FORWARD(library, name, params, args)                                    \
  extern "C" ::ember::cuda::detail::vendor_result<decltype(::name)>::type name params {     \
    static const auto real = reinterpret_cast<decltype(&::name)>(library().symbol(#name));  \
    return real args;                                                                       \
  }
