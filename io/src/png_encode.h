// The PNG encoder behind io::save_image: io/png/encode.cpp on libpng, or io/png_stub/encode.cpp
// where the build found no libpng (it throws, saying what to install). make_grid needs neither.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ember::io::detail {

constexpr int64_t kPngMaxSide = 2147483647;  // 2^31 - 1, PNG's own limit on a side

// The bytes of an 8-bit PNG file of `pixels`: rows top to bottom, `channels` interleaved bytes
// a pixel (2 gray + alpha, 3 RGB, 4 RGBA); 1 <= width, height <= kPngMaxSide. An encoder
// failure is an IOError beginning with `what` (the op and the path); memory, std::bad_alloc.
std::vector<unsigned char> encode_png(const unsigned char* pixels, int64_t width, int64_t height, int channels,
                                      const std::string& what);

}  // namespace ember::io::detail
