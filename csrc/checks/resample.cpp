// The symbolic check of robocache::resample and robocache::_resample_backward
// (and of each of fuse's streams), shared by the CPU, CUDA and Meta kernels.
#include "common.h"

namespace robocache {
namespace {

constexpr const char* kOp = "robocache.resample";

}  // namespace

ResampleSizes check_resample_stream(const at::Tensor& values, const at::Tensor& times,
                                    const at::Tensor& query_times,
                                    const std::optional<at::Tensor>& lengths,
                                    const std::string& op) {
  ROBOCACHE_CHECK_VALUE(values.dim() == 3, op, ": values must be 3-D (B, S, D); got shape ",
                        shape_str(values));
  ROBOCACHE_CHECK_TYPE(is_value_dtype(values.scalar_type()), op,
                       ": values must be float32, float64, float16 or bfloat16; got ",
                       values.scalar_type());
  ROBOCACHE_CHECK_VALUE(times.dim() == 1 || times.dim() == 2, op,
                        ": times must be (B, S) or (S,); got shape ", shape_str(times));
  ROBOCACHE_CHECK_VALUE(query_times.dim() == 1 || query_times.dim() == 2, op,
                        ": query_times must be (B, T) or (T,); got shape ", shape_str(query_times));
  ROBOCACHE_CHECK_TYPE(is_time_dtype(times.scalar_type()), op,
                       ": times must be float32, float64 or int64; got ", times.scalar_type());
  ROBOCACHE_CHECK_TYPE(times.scalar_type() == query_times.scalar_type(), op,
                       ": times and query_times must have the same dtype; got times ",
                       times.scalar_type(), " and query_times ", query_times.scalar_type());
  ROBOCACHE_CHECK_VALUE(times.device() == values.device(), op,
                        ": times must be on the same device as values; got values on ",
                        values.device(), " and times on ", times.device());
  ROBOCACHE_CHECK_VALUE(query_times.device() == values.device(), op,
                        ": query_times must be on the same device as values; got values on ",
                        values.device(), " and query_times on ", query_times.device());

  ResampleSizes n{values.sym_size(0), values.sym_size(1),
                  query_times.sym_size(query_times.dim() - 1), values.sym_size(2)};
  ROBOCACHE_SYM_CHECK(n.S.sym_ne(0), op,
                      ": values has no source samples (S == 0); resampling needs at least one; "
                      "values shape ",
                      shape_str(values));
  ROBOCACHE_SYM_CHECK(times.sym_size(-1).sym_eq(n.S), op,
                      ": times must have S = values.shape[1] samples; got values shape ",
                      shape_str(values), " and times shape ", shape_str(times));
  if (times.dim() == 2) {
    ROBOCACHE_SYM_CHECK(times.sym_size(0).sym_eq(n.B), op,
                        ": times has batch size different from values; got values shape ",
                        shape_str(values), " and times shape ", shape_str(times));
  }
  if (query_times.dim() == 2) {
    ROBOCACHE_SYM_CHECK(query_times.sym_size(0).sym_eq(n.B), op,
                        ": query_times has batch size different from values; got values shape ",
                        shape_str(values), " and query_times shape ", shape_str(query_times));
  }
  if (lengths.has_value()) {
    const at::Tensor& len = *lengths;
    ROBOCACHE_CHECK_TYPE(len.scalar_type() == at::kLong, op, ": lengths must be int64; got ",
                         len.scalar_type());
    ROBOCACHE_CHECK_VALUE(len.dim() == 1, op, ": lengths must be 1-D (B,); got shape ",
                          shape_str(len));
    ROBOCACHE_SYM_CHECK(len.sym_size(0).sym_eq(n.B), op,
                        ": lengths must have B = values.shape[0] entries; got values shape ",
                        shape_str(values), " and lengths shape ", shape_str(len));
    ROBOCACHE_CHECK_VALUE(len.device() == values.device(), op,
                          ": lengths must be on the same device as values; got values on ",
                          values.device(), " and lengths on ", len.device());
  }
  return n;
}

void check_grad_out(const at::Tensor& grad_out, const c10::SymInt& B, const c10::SymInt& T,
                    const c10::SymInt& D_total, const std::string& op) {
  ROBOCACHE_CHECK_VALUE(grad_out.dim() == 3, op, ": grad_out must be 3-D (B, T, D); got shape ",
                        shape_str(grad_out));
  ROBOCACHE_SYM_CHECK(grad_out.sym_size(0).sym_eq(B) & grad_out.sym_size(1).sym_eq(T) &
                          grad_out.sym_size(2).sym_eq(D_total),
                      op, ": grad_out must have shape [", B, ", ", T, ", ", D_total, "]; got ",
                      shape_str(grad_out));
}

void check_query_grad(const at::Tensor& query_times, bool query_grad, const std::string& op) {
  ROBOCACHE_CHECK_VALUE(!query_grad || at::isFloatingType(query_times.scalar_type()), op,
                        ": query_times of dtype ", query_times.scalar_type(),
                        " cannot receive a gradient");
}

ResampleChecked check_resample(const at::Tensor& values, const at::Tensor& times,
                               const at::Tensor& query_times,
                               const std::optional<at::Tensor>& lengths, c10::string_view mode) {
  ResampleChecked checked;
  checked.mode = parse_mode(mode, ModeSet::Interp, kOp);
  checked.sizes = check_resample_stream(values, times, query_times, lengths, kOp);
  return checked;
}

ResampleChecked check_resample_backward(const at::Tensor& grad_out, const at::Tensor& values,
                                        const at::Tensor& times, const at::Tensor& query_times,
                                        const std::optional<at::Tensor>& lengths,
                                        c10::string_view mode, bool query_grad) {
  const ResampleChecked checked = check_resample(values, times, query_times, lengths, mode);
  const ResampleSizes& n = checked.sizes;
  check_grad_out(grad_out, n.B, n.T, n.D, kOp);
  check_query_grad(query_times, query_grad, kOp);
  return checked;
}

InterpInputs resample_inputs(const ResampleChecked& checked, const at::Tensor& values,
                             const at::Tensor& times, const at::Tensor& query_times,
                             const std::optional<at::Tensor>& lengths, bool host_lengths) {
  if (host_lengths && lengths.has_value()) {
    check_lengths_in_range(*lengths, 1, values.size(1), "S", kOp);
  }
  return prepare_interp_inputs({values}, {times}, query_times, {lengths}, {checked.mode});
}

}  // namespace robocache
