#include "robocache/window_checks.h"

#include "robocache/error.h"

#include <string>

namespace robocache {
namespace {

std::string shape_of(const at::Tensor& t) {
  return message(t.sym_sizes());
}

bool is_floating(at::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kHalf || t == at::kBFloat16;
}

void check_index_tensor(const at::Tensor& t, const char* name, int64_t dim, const char* shape,
                        const at::Tensor& values, const char* op) {
  ROBOCACHE_CHECK_TYPE(t.scalar_type() == at::kLong, op, ": ", name, " must be int64; got ",
                       t.scalar_type());
  ROBOCACHE_CHECK_VALUE(t.dim() == dim, op, ": ", name, " must be ", shape, "; got shape ",
                        shape_of(t));
  ROBOCACHE_CHECK_VALUE(t.device() == values.device(), op, ": ", name,
                        " must be on the same device as values; got values on ", values.device(),
                        " and ", name, " on ", t.device());
}

}  // namespace

WindowMode parse_window_mode(c10::string_view mode, const char* op) {
  if (mode == "nearest")
    return WindowMode::Nearest;
  if (mode == "previous")
    return WindowMode::Previous;
  if (mode == "linear")
    return WindowMode::Linear;
  if (mode == "mean")
    return WindowMode::Mean;
  ROBOCACHE_CHECK_VALUE(false, op,
                        ": mode must be 'nearest', 'previous', 'linear' or 'mean'; got '",
                        std::string(mode), "'");
  return WindowMode::Nearest;  // not reached
}

WindowRule window_rule(c10::string_view mode, int64_t interval, int64_t tolerance,
                       int64_t edge_tolerance, const char* op) {
  WindowRule rule{parse_window_mode(mode, op), interval, tolerance, edge_tolerance};
  ROBOCACHE_CHECK_VALUE(interval >= 0, op, ": interval must be >= 0 ns; got ", interval);
  ROBOCACHE_CHECK_VALUE(rule.mode != WindowMode::Mean || interval > 0, op,
                        ": mode 'mean' needs an interval > 0 ns (the samples in "
                        "(q - interval, q] are averaged); got ",
                        interval);
  ROBOCACHE_CHECK_VALUE(tolerance >= -1, op, ": tolerance must be >= 0 ns, or -1 for none; got ",
                        tolerance);
  ROBOCACHE_CHECK_VALUE(edge_tolerance >= 0, op, ": edge_tolerance must be >= 0 ns; got ",
                        edge_tolerance);
  return rule;
}

namespace {

// times, offsets, episode and query_times against N rows on `device`.
WindowSizes check_ragged(const at::Tensor& times, const at::Tensor& offsets,
                         const at::Tensor& episode, const at::Tensor& query_times,
                         const at::Tensor& values, const c10::SymInt& N, const c10::SymInt& D,
                         const char* op) {
  check_index_tensor(times, "times", 1, "(N,)", values, op);
  check_index_tensor(offsets, "offsets", 1, "(E + 1,)", values, op);
  check_index_tensor(episode, "episode", 1, "(B,)", values, op);
  check_index_tensor(query_times, "query_times", 2, "(B, W)", values, op);
  WindowSizes n{N, D, offsets.sym_size(0) - 1, episode.sym_size(0), query_times.sym_size(1)};
  ROBOCACHE_SYM_CHECK(times.sym_size(0).sym_eq(n.N), op,
                      ": times must have one entry per row of values (N = ", n.N,
                      "); got times shape ", shape_of(times));
  ROBOCACHE_SYM_CHECK(offsets.sym_size(0).sym_ge(1), op,
                      ": offsets must have E + 1 >= 1 entries; got shape ", shape_of(offsets));
  ROBOCACHE_SYM_CHECK(query_times.sym_size(0).sym_eq(n.B), op,
                      ": query_times must have one row per entry of episode; got episode shape ",
                      shape_of(episode), " and query_times shape ", shape_of(query_times));
  return n;
}

}  // namespace

WindowSizes check_window_inputs(const at::Tensor& values, const at::Tensor& times,
                                const at::Tensor& offsets, const at::Tensor& episode,
                                const at::Tensor& query_times, const WindowRule& rule,
                                const char* op) {
  ROBOCACHE_CHECK_VALUE(values.dim() == 2, op, ": values must be 2-D (N, D); got shape ",
                        shape_of(values));
  const bool blends = rule.mode == WindowMode::Linear || rule.mode == WindowMode::Mean;
  ROBOCACHE_CHECK_TYPE(!blends || is_floating(values.scalar_type()), op, ": mode '",
                       rule.mode == WindowMode::Linear ? "linear" : "mean",
                       "' needs float32, float64, float16 or bfloat16 values; got ",
                       values.scalar_type(), " (use 'nearest' or 'previous')");
  return check_ragged(times, offsets, episode, query_times, values, values.sym_size(0),
                      values.sym_size(1), op);
}

WindowSizes check_window_backward_inputs(const at::Tensor& grad_out, const at::Tensor& times,
                                         const at::Tensor& offsets, const at::Tensor& episode,
                                         const at::Tensor& query_times,
                                         const c10::SymInt& num_values, const char* op) {
  ROBOCACHE_CHECK_TYPE(is_floating(grad_out.scalar_type()), op, ": grad_out must be floating; got ",
                       grad_out.scalar_type());
  ROBOCACHE_CHECK_VALUE(grad_out.dim() == 3, op, ": grad_out must be 3-D (B, W, D); got shape ",
                        shape_of(grad_out));
  ROBOCACHE_SYM_CHECK(num_values.sym_ge(0), op, ": num_values must be >= 0; got ", num_values);
  const WindowSizes n = check_ragged(times, offsets, episode, query_times, grad_out, num_values,
                                     grad_out.sym_size(2), op);
  ROBOCACHE_SYM_CHECK(grad_out.sym_size(0).sym_eq(n.B) & grad_out.sym_size(1).sym_eq(n.W), op,
                      ": grad_out must be (B, W, D) with (B, W) = (", n.B, ", ", n.W,
                      "); got shape ", shape_of(grad_out));
  return n;
}

}  // namespace robocache
