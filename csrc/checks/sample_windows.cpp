// The symbolic check of robocache::sample_windows and
// robocache::_sample_windows_backward, shared by the CPU, CUDA and Meta
// kernels (sizes only: no data is read, so it runs under fake tensors).
#include "common.h"

namespace robocache {
namespace {

constexpr const char* kOp = "robocache.sample_windows";

// times, offsets, episode and query_times against N rows; the index on
// times' device, `values` there or pinned (check_values_device).
WindowSizes check_packed(const at::Tensor& times, const at::Tensor& offsets,
                         const at::Tensor& episode, const at::Tensor& query_times,
                         const at::Tensor& values, const char* values_name, const c10::SymInt& N,
                         const c10::SymInt& D) {
  const char* op = kOp;
  check_index_tensor(times, "times", 1, "(N,)", times, "times", op);
  check_values_device(values, values_name, times, op);
  check_index_tensor(offsets, "offsets", 1, "(E + 1,)", times, "times", op);
  check_index_tensor(episode, "episode", 1, "(B,)", times, "times", op);
  check_index_tensor(query_times, "query_times", 2, "(B, W)", times, "times", op);
  WindowSizes n{N, D, offsets.sym_size(0) - 1, episode.sym_size(0), query_times.sym_size(1)};
  ROBOCACHE_SYM_CHECK(times.sym_size(0).sym_eq(n.N), op,
                      ": times must have one entry per row of values (N = ", n.N,
                      "); got times shape ", shape_str(times));
  ROBOCACHE_SYM_CHECK(offsets.sym_size(0).sym_ge(1), op,
                      ": offsets must have E + 1 >= 1 entries; got shape ", shape_str(offsets));
  ROBOCACHE_SYM_CHECK(query_times.sym_size(0).sym_eq(n.B), op,
                      ": query_times must have one row per entry of episode; got episode shape ",
                      shape_str(episode), " and query_times shape ", shape_str(query_times));
  return n;
}

}  // namespace

WindowRule window_rule(c10::string_view mode, int64_t interval, int64_t tolerance,
                       int64_t edge_tolerance, const char* op) {
  WindowRule rule{parse_mode(mode, ModeSet::Window, op), interval, tolerance, edge_tolerance};
  ROBOCACHE_CHECK_VALUE(interval >= 0, op, ": interval must be >= 0 ns; got ", interval);
  ROBOCACHE_CHECK_VALUE(rule.mode != Mode::Mean || interval > 0, op,
                        ": mode 'mean' needs an interval > 0 ns (the samples in "
                        "(q - interval, q] are averaged); got ",
                        interval);
  ROBOCACHE_CHECK_VALUE(tolerance >= -1, op, ": tolerance must be >= 0 ns, or -1 for none; got ",
                        tolerance);
  ROBOCACHE_CHECK_VALUE(edge_tolerance >= 0, op, ": edge_tolerance must be >= 0 ns; got ",
                        edge_tolerance);
  return rule;
}

SampleWindowsChecked check_sample_windows(const at::Tensor& values, const at::Tensor& times,
                                          const at::Tensor& offsets, const at::Tensor& episode,
                                          const at::Tensor& query_times, c10::string_view mode,
                                          int64_t interval, int64_t tolerance,
                                          int64_t edge_tolerance) {
  const char* op = kOp;
  const WindowRule rule = window_rule(mode, interval, tolerance, edge_tolerance, op);
  ROBOCACHE_CHECK_VALUE(values.dim() == 2, op, ": values must be 2-D (N, D); got shape ",
                        shape_str(values));
  const bool blends = mode_blends(rule.mode);
  ROBOCACHE_CHECK_TYPE(!blends || is_value_dtype(values.scalar_type()), op, ": mode '",
                       mode_name(rule.mode),
                       "' needs float32, float64, float16 or bfloat16 values; got ",
                       values.scalar_type(), " (use 'nearest' or 'previous')");
  return {rule, check_packed(times, offsets, episode, query_times, values, "values",
                             values.sym_size(0), values.sym_size(1))};
}

SampleWindowsChecked check_sample_windows_backward(
    const at::Tensor& grad_out, const at::Tensor& times, const at::Tensor& offsets,
    const at::Tensor& episode, const at::Tensor& query_times, c10::string_view mode,
    int64_t interval, int64_t tolerance, int64_t edge_tolerance, const c10::SymInt& num_values) {
  const char* op = kOp;
  const WindowRule rule = window_rule(mode, interval, tolerance, edge_tolerance, op);
  ROBOCACHE_CHECK_TYPE(is_value_dtype(grad_out.scalar_type()), op,
                       ": grad_out must be floating; got ", grad_out.scalar_type());
  ROBOCACHE_CHECK_VALUE(grad_out.dim() == 3, op, ": grad_out must be 3-D (B, W, D); got shape ",
                        shape_str(grad_out));
  ROBOCACHE_SYM_CHECK(num_values.sym_ge(0), op, ": num_values must be >= 0; got ", num_values);
  ROBOCACHE_CHECK_VALUE(grad_out.device() == times.device(), op,
                        ": grad_out must be on the same device as times; got times on ",
                        times.device(), " and grad_out on ", grad_out.device());
  const WindowSizes n = check_packed(times, offsets, episode, query_times, grad_out, "grad_out",
                                     num_values, grad_out.sym_size(2));
  ROBOCACHE_SYM_CHECK(grad_out.sym_size(0).sym_eq(n.B) & grad_out.sym_size(1).sym_eq(n.W), op,
                      ": grad_out must be (B, W, D) with (B, W) = (", n.B, ", ", n.W,
                      "); got shape ", shape_str(grad_out));
  return {rule, n};
}

}  // namespace robocache
