// Loads the libraries named on the command line with dlopen, as a Python extension or a plugin
// host would load a shared ember, and fails with dlopen's message if one cannot be: e.g. when
// ember's initial-exec thread-locals (EMBER_HOT_TLS) make a TLS block too large for glibc's
// static TLS surplus ("cannot allocate memory in static TLS block"). tests/install runs it.
#include <dlfcn.h>

#include <cstdio>

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (dlopen(argv[i], RTLD_NOW | RTLD_LOCAL) == nullptr) {
      std::fprintf(stderr, "dlopen %s: %s\n", argv[i], dlerror());
      return 1;
    }
  }
  std::printf("dlopen: %d libraries loaded\n", argc - 1);
  return 0;
}
