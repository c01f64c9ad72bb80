// CUDA libraries opened on first use (Note [vendor libraries], ember/cuda/vendor_library.h): the
// loader on libraries every machine has (no GPU needed), and ember's own three. In a GPU build
// those are the real cuBLASLt/cuDNN/NCCL (dlopen needs no GPU); in the simulation build, the
// simulation's runtime library, through which every simulated matmul, convolution and
// collective of the suite then goes.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "ember/cuda/vendor_library.h"
#include "support/test_support.h"
#include "vendor_libraries.h"
#if EMBER_TEST_HAS_NCCL
#include "nccl_library.h"
#endif

namespace ember::test {
namespace {

std::string symbol_error(cuda::VendorLibrary& library, const char* name) {
  try {
    library.symbol(name);
  } catch (const DeviceError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(VendorLibrary, AMissingLibraryIsAnErrorNamingItWhereItLookedAndWhatToDo) {
  cuda::VendorLibrary library("Nothing", "libember_no_such_library.so.7", {"/nonexistent/ember/dir"});
  EXPECT_FALSE(library.available());
  EXPECT_FALSE(library.available());  // the first answer stands
  const std::string msg = symbol_error(library, "nothingCreate");
  for (const char* part : {"Nothing (libember_no_such_library.so.7) could not be loaded",
                           "/nonexistent/ember/dir/libember_no_such_library.so.7: not there",
                           "libember_no_such_library.so.7: cannot open shared object file",
                           "LD_LIBRARY_PATH"})
    EXPECT_NE(msg.find(part), std::string::npos) << part << "\n" << msg;
  EXPECT_NE(library.location().find("could not be loaded"), std::string::npos) << library.location();
}

TEST(VendorLibrary, OpensBySonameAndResolvesItsFunctions) {
  cuda::VendorLibrary library("libm", "libm.so.6", {});
  ASSERT_TRUE(library.available()) << library.location();
  EXPECT_EQ(library.location().front(), '/') << library.location();
  const auto cosine = reinterpret_cast<double (*)(double)>(library.symbol("cos"));
  EXPECT_EQ(cosine(0.0), 1.0);
  EXPECT_EQ(cosine(M_PI), std::cos(M_PI));
  const std::string msg = symbol_error(library, "ember_no_such_function");
  EXPECT_NE(msg.find("ember_no_such_function not found in libm"), std::string::npos) << msg;
}

// A name the dynamic loader does not know, only in a directory the build recorded: the last
// place looked, after ember's own directory and the loader's search.
TEST(VendorLibrary, TheBuildsDirectoriesAreLookedInLast) {
  const auto dir = std::filesystem::temp_directory_path() / ("ember_vendor_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  // The loader's own copy of libm, under a name nothing else uses.
  cuda::VendorLibrary probe("libm", "libm.so.6", {});
  ASSERT_TRUE(probe.available());
  std::filesystem::create_symlink(probe.location(), dir / "libember_vendor_test.so.1");
  cuda::VendorLibrary library("Test", "libember_vendor_test.so.1", {"/nonexistent/ember/dir", dir.string()});
  EXPECT_TRUE(library.available()) << library.location();
  if (library.available()) {
    const auto cosine = reinterpret_cast<double (*)(double)>(library.symbol("cos"));
    EXPECT_EQ(cosine(0.0), 1.0);
  }
  std::filesystem::remove_all(dir);
}

// ember's own: each opens (the real library in a GPU build, the simulation's runtime in a
// simulation build) and has the functions ember calls first.
TEST(VendorLibrary, EmbersLibrariesOpenWithoutAGpu) {
  struct Case {
    cuda::VendorLibrary& library;
    const char* function;
  };
  std::vector<Case> cases = {{ops::cuda::cublaslt_library(), "cublasLtCreate"},
                             {ops::cuda::cudnn_library(), "cudnnCreate"}};
#if EMBER_TEST_HAS_NCCL
  cases.push_back({distributed::detail::nccl_library(), "ncclGetUniqueId"});
#endif
  for (const Case& c : cases) {
    ASSERT_TRUE(c.library.available()) << c.library.location();
    EXPECT_NE(c.library.symbol(c.function), nullptr) << c.library.display_name();
    if (cuda::is_simulated()) {
      EXPECT_NE(c.library.location().find("ember_cuda_sim_runtime"), std::string::npos)
          << c.library.location();
    }
  }
}

}  // namespace
}  // namespace ember::test
