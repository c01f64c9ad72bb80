// What every training example reports, in one place: a progress bar per epoch (loss,
// accuracy, samples/s, ETA; a live line on a terminal, a line every 10% otherwise), a
// metrics.csv that is flushed row by row (nothing lost on a crash), an SVG chart of the
// curves, and the final `result: {json}` line. Header-only so each example stays one file a
// user can copy together with this header.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <ember/ember.h>

namespace ember::examples {

inline std::string human_rate(double per_s) {
  char buf[32];
  if (per_s >= 1e6) std::snprintf(buf, sizeof buf, "%.2fM", per_s / 1e6);
  else if (per_s >= 1e3) std::snprintf(buf, sizeof buf, "%.1fK", per_s / 1e3);
  else std::snprintf(buf, sizeof buf, "%.1f", per_s);
  return buf;
}

inline std::string human_duration(double s) {
  char buf[32];
  const long t = long(std::max(0.0, s) + 0.5);
  if (t >= 3600) std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  else std::snprintf(buf, sizeof buf, "%ld:%02ld", t / 60, t % 60);
  return buf;
}

// One epoch's progress line: "epoch 1/3 [#######.......] 210/469 loss 0.2314 acc 93.1%
// 41.2K samples/s ETA 0:06". Redrawn in place on a terminal; otherwise printed at every 10%.
class ProgressBar {
 public:
  ProgressBar(std::string label, int64_t total, int64_t start = 0)
      : label_(std::move(label)), total_(total), done_(start), start_(start),
        tty_(isatty(fileno(stdout)) != 0), t0_(std::chrono::steady_clock::now()) {}

  // Called after each batch with the running averages of the epoch so far.
  void update(int64_t done, double loss, double accuracy, double samples_per_s) {
    char stats[64];
    std::snprintf(stats, sizeof stats, "loss %.4f acc %5.2f%%", loss, 100.0 * accuracy);
    update(done, stats, samples_per_s, "samples/s");
  }
  // The general form: `stats` is shown as is, then the rate in `unit` and the ETA.
  void update(int64_t done, const std::string& stats, double rate, const char* unit) {
    done_ = done;
    const int decile = total_ > 0 ? int(10 * done / total_) : 10;
    if (!tty_ && decile == last_decile_ && done != total_) return;
    last_decile_ = decile;
    const double elapsed = seconds();
    const double eta = done > start_ ? elapsed / double(done - start_) * double(total_ - done) : 0;
    const int width = 24;
    const int filled = total_ > 0 ? int(width * done / total_) : width;
    std::string bar(size_t(filled), '#');
    bar.resize(size_t(width), '.');
    std::printf("%s%s [%s] %lld/%lld %s %s %s %s %s%s", tty_ ? "\r" : "", label_.c_str(),
                bar.c_str(), (long long)done, (long long)total_, stats.c_str(),
                human_rate(rate).c_str(), unit, done == total_ ? "in" : "ETA",
                human_duration(done == total_ ? elapsed : eta).c_str(), tty_ ? "\033[K" : "\n");
    std::fflush(stdout);
  }
  void finish() {
    if (tty_) std::printf("\n");
    std::fflush(stdout);
  }
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }

 private:
  std::string label_;
  int64_t total_, done_, start_;
  bool tty_;
  int last_decile_ = -1;
  std::chrono::steady_clock::time_point t0_;
};

// metrics.csv (header once, one flushed row per record; appended to on resume) and an SVG
// chart of every numeric column against `step`.
class MetricsLog {
 public:
  MetricsLog(const std::string& dir, std::vector<std::string> columns, bool append)
      : columns_(std::move(columns)) {
    std::filesystem::create_directories(dir);
    csv_path_ = dir + "/metrics.csv";
    svg_path_ = dir + "/metrics.svg";
    if (append && std::filesystem::exists(csv_path_)) load_existing();
    csv_.open(csv_path_, append ? std::ios::app : std::ios::trunc);
    EMBER_CHECK(csv_.good(), IOError, "[metrics] cannot write ", csv_path_);
    if (rows_.empty()) {
      for (size_t i = 0; i < columns_.size(); ++i) csv_ << (i ? "," : "") << columns_[i];
      csv_ << "\n" << std::flush;
    }
  }

  // values in column order; the first column is the x axis (step).
  void record(const std::vector<double>& values) {
    rows_.push_back(values);
    for (size_t i = 0; i < values.size(); ++i) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.9g", values[i]);
      csv_ << (i ? "," : "") << buf;
    }
    csv_ << "\n" << std::flush;
  }

  // One panel per column after the first, in a grid; polylines with min/max labels.
  void write_svg(const std::string& title) const {
    const int panel_w = 360, panel_h = 220, pad = 40, per_row = 2;
    const int n = int(columns_.size()) - 1;
    if (n <= 0 || rows_.empty()) return;
    const int rows = (n + per_row - 1) / per_row;
    const int width = per_row * (panel_w + pad) + pad, height = rows * (panel_h + pad) + 2 * pad;
    std::string svg = "<svg xmlns='http://www.w3.org/2000/svg' width='" + std::to_string(width) +
                      "' height='" + std::to_string(height) + "' font-family='sans-serif' font-size='12'>\n";
    svg += "<rect width='100%' height='100%' fill='white'/>\n<text x='" + std::to_string(pad) +
           "' y='24' font-size='16'>" + title + "</text>\n";
    double x_min = rows_.front()[0], x_max = rows_.front()[0];
    for (const auto& r : rows_) x_min = std::min(x_min, r[0]), x_max = std::max(x_max, r[0]);
    if (x_max == x_min) x_max = x_min + 1;
    for (int c = 1; c <= n; ++c) {
      const int px = pad + ((c - 1) % per_row) * (panel_w + pad);
      const int py = 2 * pad + ((c - 1) / per_row) * (panel_h + pad);
      double lo = INFINITY, hi = -INFINITY;
      for (const auto& r : rows_)
        if (std::isfinite(r[size_t(c)])) lo = std::min(lo, r[size_t(c)]), hi = std::max(hi, r[size_t(c)]);
      if (!std::isfinite(lo)) continue;
      if (hi == lo) hi = lo + 1;
      char buf[256];
      std::snprintf(buf, sizeof buf,
                    "<rect x='%d' y='%d' width='%d' height='%d' fill='none' stroke='#888'/>\n"
                    "<text x='%d' y='%d'>%s (%.4g .. %.4g)</text>\n",
                    px, py, panel_w, panel_h, px, py - 6, columns_[size_t(c)].c_str(), lo, hi);
      svg += buf;
      svg += "<polyline fill='none' stroke='#1f77b4' stroke-width='1.5' points='";
      for (const auto& r : rows_) {
        if (!std::isfinite(r[size_t(c)])) continue;
        const double x = px + (r[0] - x_min) / (x_max - x_min) * panel_w;
        const double y = py + panel_h - (r[size_t(c)] - lo) / (hi - lo) * panel_h;
        std::snprintf(buf, sizeof buf, "%.1f,%.1f ", x, y);
        svg += buf;
      }
      svg += "'/>\n";
    }
    svg += "</svg>\n";
    // Written whole to a temporary name and renamed: a reader never sees half a chart.
    const std::string tmp = svg_path_ + ".tmp";
    std::ofstream(tmp) << svg;
    std::filesystem::rename(tmp, svg_path_);
  }

  const std::string& csv_path() const { return csv_path_; }
  const std::string& svg_path() const { return svg_path_; }

 private:
  void load_existing() {
    std::ifstream in(csv_path_);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::vector<double> r;
      size_t pos = 0;
      while (pos <= line.size()) {
        const size_t comma = std::min(line.find(',', pos), line.size());
        r.push_back(std::strtod(line.substr(pos, comma - pos).c_str(), nullptr));
        pos = comma + 1;
      }
      if (r.size() == columns_.size()) rows_.push_back(std::move(r));
    }
  }

  std::vector<std::string> columns_;
  std::vector<std::vector<double>> rows_;
  std::string csv_path_, svg_path_;
  std::ofstream csv_;
};

// The final machine-readable line: result: {"k": v, ...} (numbers as numbers, strings quoted;
// a value never measured (NaN) or infinite is null: JSON has neither, parsers refuse the words).
class ResultLine {
 public:
  ResultLine& num(const std::string& key, double v) {
    if (!std::isfinite(v)) return add(key, "null");
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.6g", v);
    return add(key, buf);
  }
  ResultLine& text(const std::string& key, const std::string& v) { return add(key, "\"" + v + "\""); }
  void print() const { std::printf("result: {%s}\n", body_.c_str()); }

 private:
  ResultLine& add(const std::string& key, const std::string& v) {
    body_ += (body_.empty() ? "\"" : ", \"") + key + "\": " + v;
    return *this;
  }
  std::string body_;
};

}  // namespace ember::examples
