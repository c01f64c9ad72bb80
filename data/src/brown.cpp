// Brown corpus helpers (see brown.h).
#include "ember/data/brown.h"

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "ember/error.h"

namespace ember::data {

std::string brown_untag(std::string_view tagged) {
  std::string out;
  out.reserve(tagged.size() * 3 / 4);
  auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\r'; };
  size_t line_start = 0;
  while (line_start <= tagged.size()) {
    size_t line_end = tagged.find('\n', line_start);
    if (line_end == std::string_view::npos) line_end = tagged.size();
    const std::string_view line = tagged.substr(line_start, line_end - line_start);
    bool any = false;
    for (size_t i = 0; i < line.size();) {
      while (i < line.size() && is_space(line[i])) ++i;
      size_t k = i;
      while (k < line.size() && !is_space(line[k])) ++k;
      if (k > i) {
        std::string_view token = line.substr(i, k - i);
        const size_t slash = token.rfind('/');
        if (slash != std::string_view::npos && slash > 0) token = token.substr(0, slash);
        if (any) out.push_back(' ');
        out.append(token);
        any = true;
      }
      i = k;
    }
    if (any) out.push_back('\n');
    line_start = line_end + 1;
  }
  return out;
}

std::vector<std::string> brown_files(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<std::string> files;
  if (fs::is_directory(dir, ec)) {
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      const std::string name = e.path().filename().string();
      if (name.size() == 4 && name[0] == 'c' && name[1] >= 'a' && name[1] <= 'r' &&
          std::isdigit(static_cast<unsigned char>(name[2])) &&
          std::isdigit(static_cast<unsigned char>(name[3])) && e.is_regular_file(ec))
        files.push_back(e.path().string());
    }
  }
  if (files.empty())
    throw IOError(str("[brown] ", dir, ": no Brown corpus files (ca01 .. cr09) found; fetch them with: "
                      "bash scripts/fetch_data.sh brown"));
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace ember::data
