// io::save_image's PNG encoder on libpng (Debian libpng-dev). libpng reports errors by longjmp:
// no C++ object with a destructor lives in encode_rows' frame, and the write callback only
// appends to a vector and never lets an exception through libpng's C frames.
#include <png.h>

#include <csetjmp>
#include <cstdio>
#include <new>

#include "ember/error.h"
#include "ember/io/image.h"
#include "../src/png_encode.h"

namespace ember::io {

namespace {

struct PngSink {
  std::vector<unsigned char>* bytes;
  bool out_of_memory = false;
  char message[256] = {0};
};

void png_on_write(png_structp png, png_bytep data, size_t n) {
  auto* sink = static_cast<PngSink*>(png_get_io_ptr(png));
  bool failed = false;
  try {
    sink->bytes->insert(sink->bytes->end(), data, data + n);
  } catch (...) {  // std::bad_alloc
    failed = true;
  }
  if (failed) {
    sink->out_of_memory = true;
    png_error(png, "out of memory while encoding");
  }
}

void png_on_flush(png_structp) {}

void png_on_error(png_structp png, png_const_charp message) {
  auto* sink = static_cast<PngSink*>(png_get_error_ptr(png));
  std::snprintf(sink->message, sizeof sink->message, "%s", message);
  png_longjmp(png, 1);
}

void png_on_warning(png_structp, png_const_charp) {}

// Encodes rows of `channels` bytes a pixel into sink->bytes; false (with sink->message) on error.
bool encode_rows(PngSink* sink, const unsigned char* pixels, png_uint_32 width, png_uint_32 height,
                 int color_type, size_t row_bytes) {
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, sink, png_on_error, png_on_warning);
  if (png == nullptr) {
    std::snprintf(sink->message, sizeof sink->message, "libpng could not start an encoder");
    return false;
  }
  png_infop info = png_create_info_struct(png);
  if (info == nullptr) {
    png_destroy_write_struct(&png, nullptr);
    std::snprintf(sink->message, sizeof sink->message, "libpng could not start an encoder");
    return false;
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return false;
  }
  png_set_write_fn(png, sink, png_on_write, png_on_flush);
  // PNG's own limit (2^31 - 1) instead of libpng's default of a million pixels a side.
  png_set_user_limits(png, PNG_UINT_31_MAX, PNG_UINT_31_MAX);
  png_set_IHDR(png, info, width, height, 8, color_type, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  for (png_uint_32 r = 0; r < height; ++r) png_write_row(png, pixels + size_t(r) * row_bytes);
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return true;
}

}  // namespace

bool png_output_available() { return true; }

namespace detail {

std::vector<unsigned char> encode_png(const unsigned char* pixels, int64_t width, int64_t height, int channels,
                                      const std::string& what) {
  static_assert(kPngMaxSide == int64_t(PNG_UINT_31_MAX));
  const int color_type = channels == 2 ? PNG_COLOR_TYPE_GRAY_ALPHA
                         : channels == 3 ? PNG_COLOR_TYPE_RGB
                                         : PNG_COLOR_TYPE_RGB_ALPHA;
  std::vector<unsigned char> bytes;
  PngSink sink{&bytes};
  if (!encode_rows(&sink, pixels, png_uint_32(width), png_uint_32(height), color_type,
                   size_t(width) * size_t(channels))) {
    if (sink.out_of_memory) throw std::bad_alloc();
    throw IOError(str(what, ": libpng failed to encode the image: ", sink.message));
  }
  return bytes;
}

}  // namespace detail

}  // namespace ember::io
