// io::save_image's PNG encoder in a build without libpng (libpng-dev was not found at configure
// time; scripts/setup.sh installs it). make_grid works without it.
#include "ember/error.h"
#include "ember/io/image.h"
#include "../src/png_encode.h"

namespace ember::io {

bool png_output_available() { return false; }

namespace detail {

std::vector<unsigned char> encode_png(const unsigned char*, int64_t, int64_t, int, const std::string& what) {
  throw NotImplementedError(str(what, ": this build of ember has no PNG output: install libpng-dev (Debian) "
                                      "and configure again"));
}

}  // namespace detail

}  // namespace ember::io
