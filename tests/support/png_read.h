// A small PNG reader for the tests of io::save_image, independent of the libpng that writes
// the files: it checks the signature, every chunk's CRC, the IHDR fields and the end chunk,
// inflates the IDAT stream with zlib and undoes the five row filters. It reads what save_image
// writes (8-bit, non-interlaced gray, gray+alpha, RGB, RGBA) and reports anything else as an
// error instead of guessing.
#pragma once

#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace ember::test {

struct Png {
  uint32_t width = 0, height = 0;
  int bit_depth = 0, color_type = -1, channels = 0;
  std::vector<uint8_t> pixels;  // row-major, `channels` bytes a pixel
  std::string error;            // empty when the file was read
  uint8_t at(uint32_t row, uint32_t col, int channel) const {
    return pixels[(size_t(row) * width + col) * size_t(channels) + size_t(channel)];
  }
};

namespace png_detail {
inline uint32_t be32(const uint8_t* p) {
  return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | uint32_t(p[3]);
}
inline int paeth(int a, int b, int c) {
  const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
  return pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
}
}  // namespace png_detail

inline Png read_png(const std::string& path) {
  using png_detail::be32;
  Png png;
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    png.error = "cannot open " + path;
    return png;
  }
  const std::vector<uint8_t> b((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  static const uint8_t kSignature[8] = {137, 80, 78, 71, 13, 10, 26, 10};
  if (b.size() < 8 || !std::equal(kSignature, kSignature + 8, b.begin())) {
    png.error = "no PNG signature";
    return png;
  }
  std::vector<uint8_t> idat;
  bool have_header = false, ended = false;
  size_t at = 8;
  while (!ended) {
    if (at + 12 > b.size()) {
      png.error = "truncated chunk at byte " + std::to_string(at);
      return png;
    }
    const uint32_t len = be32(&b[at]);
    if (len > b.size() - at - 12) {
      png.error = "chunk length past the end at byte " + std::to_string(at);
      return png;
    }
    const std::string type(reinterpret_cast<const char*>(&b[at + 4]), 4);
    const uint8_t* data = &b[at + 8];
    const uint32_t crc = uint32_t(crc32(0L, &b[at + 4], uInt(len + 4)));
    if (crc != be32(&b[at + 8 + len])) {
      png.error = "bad CRC in chunk " + type;
      return png;
    }
    if (type == "IHDR") {
      if (len != 13 || have_header) {
        png.error = "bad IHDR";
        return png;
      }
      have_header = true;
      png.width = be32(data);
      png.height = be32(data + 4);
      png.bit_depth = data[8];
      png.color_type = data[9];
      if (data[10] != 0 || data[11] != 0 || data[12] != 0) {
        png.error = "unexpected compression, filter or interlace method";
        return png;
      }
    } else if (type == "IDAT") {
      idat.insert(idat.end(), data, data + len);
    } else if (type == "IEND") {
      ended = true;
    }
    at += 12 + size_t(len);
  }
  if (!have_header || at != b.size()) {
    png.error = !have_header ? "no IHDR" : "bytes after IEND";
    return png;
  }
  switch (png.color_type) {
    case 0: png.channels = 1; break;
    case 4: png.channels = 2; break;
    case 2: png.channels = 3; break;
    case 6: png.channels = 4; break;
    default: png.error = "color type " + std::to_string(png.color_type) + " is not read here"; return png;
  }
  if (png.bit_depth != 8 || png.width == 0 || png.height == 0) {
    png.error = "bit depth " + std::to_string(png.bit_depth) + " or an empty image";
    return png;
  }
  const size_t stride = size_t(png.width) * size_t(png.channels);
  std::vector<uint8_t> raw((stride + 1) * png.height);
  uLongf raw_len = uLongf(raw.size());
  if (uncompress(raw.data(), &raw_len, idat.data(), uLong(idat.size())) != Z_OK || raw_len != raw.size()) {
    png.error = "the image data does not inflate to " + std::to_string(raw.size()) + " bytes";
    return png;
  }
  png.pixels.assign(stride * png.height, 0);
  const size_t bpp = size_t(png.channels);
  for (size_t r = 0; r < png.height; ++r) {
    const uint8_t filter = raw[r * (stride + 1)];
    const uint8_t* in = &raw[r * (stride + 1) + 1];
    uint8_t* out = &png.pixels[r * stride];
    const uint8_t* up = r > 0 ? &png.pixels[(r - 1) * stride] : nullptr;
    for (size_t i = 0; i < stride; ++i) {
      const int a = i >= bpp ? out[i - bpp] : 0, u = up ? up[i] : 0, c = up && i >= bpp ? up[i - bpp] : 0;
      int pred = 0;
      switch (filter) {
        case 0: pred = 0; break;
        case 1: pred = a; break;
        case 2: pred = u; break;
        case 3: pred = (a + u) / 2; break;
        case 4: pred = png_detail::paeth(a, u, c); break;
        default: png.error = "bad filter type " + std::to_string(filter); return png;
      }
      out[i] = uint8_t(in[i] + pred);
    }
  }
  return png;
}

}  // namespace ember::test
