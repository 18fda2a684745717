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
                        const at::Tensor& reference, const char* reference_name, const char* op) {
  ROBOCACHE_CHECK_TYPE(t.scalar_type() == at::kLong, op, ": ", name, " must be int64; got ",
                       t.scalar_type());
  ROBOCACHE_CHECK_VALUE(t.dim() == dim, op, ": ", name, " must be ", shape, "; got shape ",
                        shape_str(t));
  ROBOCACHE_CHECK_VALUE(t.device() == reference.device(), op, ": ", name,
                        " must be on the same device as ", reference_name, "; got ", reference_name,
                        " on ", reference.device(), " and ", name, " on ", t.device());
}

void check_values_device(const at::Tensor& values, const std::string& name, const at::Tensor& index,
                         const char* op) {
  if (values.device() == index.device())
    return;
  const bool pinned = index.is_cuda() && values.is_cpu() && values.is_pinned();
  ROBOCACHE_CHECK_VALUE(pinned, op, ": ", name, " must be on ", index.device(),
                        " as the times are, or in pinned host memory when they are on a CUDA "
                        "device; got ",
                        name, " on ", values.device(),
                        values.is_cpu() && index.is_cuda() ? " (not pinned)" : "");
  ROBOCACHE_CHECK_VALUE(values.is_contiguous(), op, ": ", name,
                        " in pinned host memory must be contiguous (the kernel reads it in place)");
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
