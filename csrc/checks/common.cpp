// The per-op checks' shared helpers (csrc/checks/common.h).
#include "common.h"

namespace robocache {

Mode parse_mode(c10::string_view mode, ModeSet modes, const char* op, const char* arg) {
  const bool windows = modes == ModeSet::Window;
  if (mode == "nearest")
    return Mode::Nearest;
  if (mode == "previous")
    return Mode::Previous;
  if (mode == "linear")
    return Mode::Linear;
  if (windows && mode == "mean")
    return Mode::Mean;
  ROBOCACHE_CHECK_VALUE(
      false, op, ": ", arg, " must be ",
      windows ? "'nearest', 'previous', 'linear' or 'mean'" : "'linear', 'nearest' or 'previous'",
      "; got '", std::string(mode), "'");
  return Mode::Nearest;  // not reached
}

void check_index_tensor(const at::Tensor& t, const char* name, int64_t dim, const char* shape,
                        const at::Tensor& values, const char* op) {
  ROBOCACHE_CHECK_TYPE(t.scalar_type() == at::kLong, op, ": ", name, " must be int64; got ",
                       t.scalar_type());
  ROBOCACHE_CHECK_VALUE(t.dim() == dim, op, ": ", name, " must be ", shape, "; got shape ",
                        shape_str(t));
  ROBOCACHE_CHECK_VALUE(t.device() == values.device(), op, ": ", name,
                        " must be on the same device as values; got values on ", values.device(),
                        " and ", name, " on ", t.device());
}

void check_lengths_in_range(const at::Tensor& lengths, int64_t lo, int64_t hi, const char* bound,
                            const std::string& op) {
  const at::Tensor len = lengths.contiguous();
  const int64_t* p = len.data_ptr<int64_t>();
  for (int64_t b = 0; b < len.numel(); ++b) {
    ROBOCACHE_CHECK_VALUE(p[b] >= lo && p[b] <= hi, op, ": lengths[", b, "] = ", p[b],
                          " is outside [", lo, ", ", bound, "] with ", bound, " = ", hi);
  }
}

}  // namespace robocache
