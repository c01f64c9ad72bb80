// The arithmetic of tools/memory_estimate.h (the formulas and their sources are there).
#include "memory_estimate.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace ember::tools {

double bytes_per_element(ParamDType dtype) { return dtype == ParamDType::f32 ? 4.0 : 2.0; }

MemoryEstimate estimate_memory(const EstimateInput& in) {
  MemoryEstimate m;
  const double p = in.params;
  const double a = bytes_per_element(in.dtype);
  m.weights = p * a;
  m.gradients = p * a;
  if (in.dtype != ParamDType::f32 && in.master_weights) m.master_weights = p * 4.0;
  switch (in.optimizer) {
    case OptimizerKind::adamw:
    case OptimizerKind::adam: m.optimizer_state = p * 8.0; break;
    case OptimizerKind::sgd_momentum: m.optimizer_state = p * 4.0; break;
    case OptimizerKind::sgd: m.optimizer_state = 0; break;
  }
  if (in.batch_tokens > 0 && in.layers > 0 && in.hidden > 0) {
    const double t = double(in.batch_tokens), l = double(in.layers), h = double(in.hidden);
    m.activations = l * t * h * (16.0 * a + 2.0);
    if (in.seq_len > 0 && in.heads > 0)
      m.activations += l * t * double(in.heads) * double(in.seq_len) * (2.0 * a + 1.0);
    if (in.vocab > 0) m.activations += t * double(in.vocab) * 8.0;
    m.activations_from_formula = true;
  } else {
    m.activations =
        kUnknownActivationFraction * (m.weights + m.gradients + m.master_weights + m.optimizer_state);
  }
  m.workspace = kWorkspaceBytes;
  return m;
}

std::optional<double> parse_count(const std::string& text) {
  if (text.empty() || !(std::isdigit(static_cast<unsigned char>(text[0])) || text[0] == '.'))
    return std::nullopt;  // no sign, no leading space, no "inf"/"nan"
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str()) return std::nullopt;
  std::string suffix(end);
  double scale = 1;
  if (suffix.size() == 1) {
    switch (std::tolower(static_cast<unsigned char>(suffix[0]))) {
      case 'k': scale = 1e3; break;
      case 'm': scale = 1e6; break;
      case 'b':
      case 'g': scale = 1e9; break;
      case 't': scale = 1e12; break;
      default: return std::nullopt;
    }
  } else if (!suffix.empty()) {
    return std::nullopt;
  }
  v *= scale;
  if (!std::isfinite(v) || v <= 0) return std::nullopt;
  return v;
}

std::optional<ParamDType> parse_param_dtype(const std::string& text) {
  if (text == "f32" || text == "float32" || text == "fp32") return ParamDType::f32;
  if (text == "bf16" || text == "bfloat16") return ParamDType::bf16;
  if (text == "f16" || text == "float16" || text == "fp16") return ParamDType::f16;
  return std::nullopt;
}

std::optional<OptimizerKind> parse_optimizer(const std::string& text) {
  if (text == "adamw") return OptimizerKind::adamw;
  if (text == "adam") return OptimizerKind::adam;
  if (text == "sgd") return OptimizerKind::sgd;
  if (text == "sgd-momentum") return OptimizerKind::sgd_momentum;
  return std::nullopt;
}

const char* to_string(ParamDType dtype) {
  switch (dtype) {
    case ParamDType::f32: return "f32";
    case ParamDType::bf16: return "bf16";
    case ParamDType::f16: return "f16";
  }
  return "?";
}

const char* to_string(OptimizerKind optimizer) {
  switch (optimizer) {
    case OptimizerKind::adamw: return "adamw";
    case OptimizerKind::adam: return "adam";
    case OptimizerKind::sgd: return "sgd";
    case OptimizerKind::sgd_momentum: return "sgd-momentum";
  }
  return "?";
}

namespace {
// At least three significant digits in the given unit: 496.0, 99.20, 9.920.
std::string scaled(double value, const char* unit) {
  char buf[64];
  const char* fmt = value >= 100 ? "%.1f %s" : value >= 10 ? "%.2f %s" : "%.3f %s";
  std::snprintf(buf, sizeof(buf), fmt, value, unit);
  return buf;
}
}  // namespace

std::string format_bytes(double bytes) {
  if (bytes >= 1e12) return scaled(bytes / 1e12, "TB");
  if (bytes >= 1e9) return scaled(bytes / 1e9, "GB");
  if (bytes >= 1e6) return scaled(bytes / 1e6, "MB");
  if (bytes >= 1e3) return scaled(bytes / 1e3, "kB");
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.0f B", bytes);
  return buf;
}

std::string format_count(double count) {
  const char* suffix = "";
  double v = count;
  if (count >= 1e12) v = count / 1e12, suffix = "T";
  else if (count >= 1e9) v = count / 1e9, suffix = "B";
  else if (count >= 1e6) v = count / 1e6, suffix = "M";
  else if (count >= 1e3) v = count / 1e3, suffix = "k";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.4g%s", v, suffix);
  return buf;
}

}  // namespace ember::tools
