// Writes small valid seed inputs for the fuzz targets: fuzz_make_seeds <out> makes
// <out>/fuzz_idx/, <out>/fuzz_safetensors/, <out>/fuzz_checkpoint/.
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "ember/factory.h"
#include "ember/io/checkpoint.h"
#include "ember/io/safetensors.h"
#include "ember/random.h"
#include "harness.h"

namespace fs = std::filesystem;
using namespace ember;

namespace {
std::string be32(uint32_t v) {
  return {char(v >> 24), char(v >> 16), char(v >> 8), char(v)};
}
std::string idx(uint32_t magic, const std::vector<uint32_t>& dims, uint8_t fill_mod) {
  std::string s = be32(magic);
  size_t n = 1;
  for (uint32_t d : dims) {
    s += be32(d);
    n *= d;
  }
  for (size_t i = 0; i < n; ++i) s += char(i % fill_mod);
  return s;
}
std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}
void put(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary) << bytes;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: fuzz_make_seeds <out>\n";
    return 2;
  }
  const fs::path out = argv[1];
  for (const char* t : {"fuzz_idx", "fuzz_safetensors", "fuzz_checkpoint"})
    fs::create_directories(out / t);

  const std::string images = idx(2051, {3, 4, 5}, 251), labels = idx(2049, {3}, 10),
                    generic = idx(0x00000802, {2, 3}, 7);
  // Mode byte: bits 0-1 plain / raw gz / gz-here / MNIST; bits 2-3 magic any / 2051 / 2049.
  put(out / "fuzz_idx/plain_images", std::string(1, char(0 | 4)) + images);
  put(out / "fuzz_idx/plain_labels", std::string(1, char(0 | 8)) + labels);
  put(out / "fuzz_idx/plain_any", std::string(1, char(0)) + generic);
  put(out / "fuzz_idx/gzhere_images", std::string(1, char(2 | 4)) + images);
  {
    // A real .gz file, for the raw-gz mode.
    const fs::path gz = out / "tmp.gz";
    gzFile g = gzopen(gz.c_str(), "wb");
    gzwrite(g, images.data(), unsigned(images.size()));
    gzclose(g);
    put(out / "fuzz_idx/rawgz_images", std::string(1, char(1 | 4)) + slurp(gz));
    fs::remove(gz);
  }
  put(out / "fuzz_idx/mnist",
      std::string(1, char(3)) + images + std::string(ember_fuzz::kSeparator) + labels);

  StateDict sd;
  sd.insert("w", arange(0, 6, 1, DType::f32).reshape({2, 3}));
  sd.insert("b", full({3}, 0.5, DType::f64));
  sd.insert("n", arange(0, 4, 1, DType::i64));
  sd.set_int("step", 7);
  const std::string st = io::to_safetensors_bytes(sd, {{"format", "pt"}});
  put(out / "fuzz_safetensors/three", st);
  put(out / "fuzz_safetensors/empty", io::to_safetensors_bytes(StateDict{}));

  io::Checkpoint ck;
  ck.model = sd;
  ck.optimizer.set_int("step", 3);
  ck.scheduler.set_scalar("lr", 0.1);
  ck.step = 1;
  ck.rng = default_generator(Device::cpu()).get_state();
  ck.meta = {{"config", "x"}};
  const fs::path tmp = out / "tmp_ckpt";
  const std::string folder = io::save_checkpoint(tmp.string(), ck, 0);
  std::string joined;
  const char* names[] = {"meta.safetensors", "model.safetensors", "optimizer.safetensors",
                         "scheduler.safetensors"};
  for (int i = 0; i < 4; ++i) {
    if (i) joined += ember_fuzz::kSeparator;
    joined += slurp(fs::path(folder) / names[i]);
  }
  put(out / "fuzz_checkpoint/no_latest", joined);
  put(out / "fuzz_checkpoint/with_latest",
      joined + std::string(ember_fuzz::kSeparator) + slurp(tmp / "latest"));
  fs::remove_all(tmp);
  std::cout << "seeds written to " << out << "\n";
  return 0;
}
