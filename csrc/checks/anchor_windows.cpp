// The symbolic check of robocache::anchor_windows, shared by the CPU, CUDA
// and Meta kernels (sizes only: no data is read, so it runs under fake
// tensors): each stream's windows as sample_windows checks them, the anchor
// stream, and the anchor-row tables.
#include "common.h"

namespace robocache {
namespace {

constexpr const char* kOp = "robocache.anchor_windows";

// "linear,previous" as its modes; spaces are dropped.
std::vector<std::string> split_modes(c10::string_view modes) {
  std::vector<std::string> tokens(1);
  for (char c : modes) {
    if (c == ',') {
      tokens.emplace_back();
    } else if (c != ' ') {
      tokens.back() += c;
    }
  }
  return tokens;
}

// One value for every stream, or K; `fallback` when none is given.
int64_t per_stream(c10::IntArrayRef given, size_t k, size_t K, int64_t fallback, const char* name,
                   const char* op) {
  ROBOCACHE_CHECK_VALUE(given.size() <= 1 || given.size() == K, op, ": ", name,
                        " must be empty, one value or one per stream; got ", given.size(),
                        " values for ", K, " streams");
  return given.empty() ? fallback : given[given.size() == 1 ? 0 : k];
}

// One rule per stream: modes one for all or K comma-separated; intervals and
// tolerances empty (0 and -1 for all), one for all, or K.
std::vector<WindowRule> anchor_window_rules(c10::string_view modes, c10::IntArrayRef intervals,
                                            c10::IntArrayRef tolerances, int64_t edge_tolerance,
                                            size_t K) {
  const char* op = kOp;
  const std::vector<std::string> tokens = split_modes(modes);
  ROBOCACHE_CHECK_VALUE(tokens.size() == 1 || tokens.size() == K, op,
                        ": modes must be one mode or one per stream, comma-separated; got ",
                        tokens.size(), " modes ('", std::string(modes), "') for ", K, " streams");
  std::vector<WindowRule> rules;
  rules.reserve(K);
  for (size_t k = 0; k < K; ++k) {
    const std::string where = std::string(op) + " (stream " + std::to_string(k) + ")";
    rules.push_back(window_rule(
        tokens[tokens.size() == 1 ? 0 : k], per_stream(intervals, k, K, 0, "intervals", op),
        per_stream(tolerances, k, K, -1, "tolerances", op), edge_tolerance, where.c_str()));
  }
  return rules;
}

AnchorWindowSizes check_anchor_window_inputs(at::TensorList values, at::TensorList times,
                                             at::TensorList offsets, at::TensorList deltas,
                                             const at::Tensor& anchor_offsets,
                                             const at::Tensor& anchor_times,
                                             const at::Tensor& index, at::TensorList anchor_rows,
                                             const std::vector<WindowRule>& rules) {
  const char* op = kOp;
  const size_t K = values.size();
  ROBOCACHE_CHECK_VALUE(K >= 1, op, ": values must hold at least one stream");
  ROBOCACHE_CHECK_VALUE(times.size() == K && offsets.size() == K && deltas.size() == K, op,
                        ": values, times, offsets and deltas must hold one tensor per stream; got ",
                        K, ", ", times.size(), ", ", offsets.size(), " and ", deltas.size());
  // The index (every time, offset and delta, the anchors, the tables) lives on
  // anchor_times' device; values there, or pinned when that is a GPU.
  check_index_tensor(anchor_times, "anchor_times", 1, "(N_anchor,)", anchor_times, "anchor_times",
                     op);
  check_index_tensor(anchor_offsets, "anchor_offsets", 1, "(E + 1,)", anchor_times, "anchor_times",
                     op);
  check_index_tensor(index, "index", 1, "(B,)", anchor_times, "anchor_times", op);
  ROBOCACHE_SYM_CHECK(anchor_offsets.sym_size(0).sym_ge(1), op,
                      ": anchor_offsets must have E + 1 >= 1 entries; got shape ",
                      shape_str(anchor_offsets));
  AnchorWindowSizes n{
      anchor_offsets.sym_size(0) - 1, index.sym_size(0), anchor_times.sym_size(0), {}};
  for (size_t k = 0; k < K; ++k) {
    const std::string at_k = "[" + std::to_string(k) + "]";
    const std::string v_name = "values" + at_k, t_name = "times" + at_k, o_name = "offsets" + at_k,
                      d_name = "deltas" + at_k;
    const at::Tensor& v = values[k];
    ROBOCACHE_CHECK_VALUE(v.dim() >= 1, op, ": ", v_name, " must be (N, *shape); got a 0-d tensor");
    check_values_device(v, v_name, anchor_times, op);
    const bool blends = mode_blends(rules[k].mode);
    ROBOCACHE_CHECK_TYPE(!blends || is_value_dtype(v.scalar_type()), op, ": mode '",
                         mode_name(rules[k].mode), "' of ", v_name,
                         " needs float32, float64, float16 or bfloat16 values; got ",
                         v.scalar_type(), " (use 'nearest' or 'previous')");
    check_index_tensor(times[k], t_name.c_str(), 1, "(N,)", anchor_times, "anchor_times", op);
    check_index_tensor(offsets[k], o_name.c_str(), 1, "(E + 1,)", anchor_times, "anchor_times", op);
    check_index_tensor(deltas[k], d_name.c_str(), 1, "(W,)", anchor_times, "anchor_times", op);
    c10::SymInt D = 1;
    for (int64_t d = 1; d < v.dim(); ++d)
      D = D * v.sym_size(d);
    WindowSizes s{v.sym_size(0), D, n.E, n.B, deltas[k].sym_size(0)};
    ROBOCACHE_SYM_CHECK(times[k].sym_size(0).sym_eq(s.N), op, ": ", t_name,
                        " must have one entry per row of ", v_name, " (N = ", s.N, "); got shape ",
                        shape_str(times[k]));
    ROBOCACHE_SYM_CHECK(offsets[k].sym_size(0).sym_eq(anchor_offsets.sym_size(0)), op, ": ", o_name,
                        " must have E + 1 = ", anchor_offsets.sym_size(0),
                        " entries, as anchor_offsets has; got shape ", shape_str(offsets[k]));
    ROBOCACHE_SYM_CHECK(s.W.sym_ge(1), op, ": ", d_name,
                        " must hold at least one offset from the anchor time; got shape ",
                        shape_str(deltas[k]));
    n.streams.push_back(s);
  }
  for (size_t j = 0; j < anchor_rows.size(); ++j) {
    const at::Tensor& rows = anchor_rows[j];
    const std::string name = "anchor_rows[" + std::to_string(j) + "]";
    ROBOCACHE_CHECK_VALUE(rows.dim() >= 1, op, ": ", name,
                          " must be (N_anchor, *shape); got a 0-d tensor");
    check_values_device(rows, name, anchor_times, op);
    ROBOCACHE_SYM_CHECK(rows.sym_size(0).sym_eq(n.N_anchor), op, ": ", name,
                        " must have one row per row of the anchor stream (N_anchor = ", n.N_anchor,
                        "); got shape ", shape_str(rows));
  }
  return n;
}

}  // namespace

AnchorWindowsChecked check_anchor_windows(at::TensorList values, at::TensorList times,
                                          at::TensorList offsets, at::TensorList deltas,
                                          const at::Tensor& anchor_offsets,
                                          const at::Tensor& anchor_times, const at::Tensor& index,
                                          at::TensorList anchor_rows, c10::string_view modes,
                                          c10::IntArrayRef intervals, c10::IntArrayRef tolerances,
                                          int64_t edge_tolerance) {
  AnchorWindowsChecked checked;
  checked.rules = anchor_window_rules(modes, intervals, tolerances, edge_tolerance, values.size());
  checked.sizes = check_anchor_window_inputs(values, times, offsets, deltas, anchor_offsets,
                                             anchor_times, index, anchor_rows, checked.rules);
  return checked;
}

std::vector<c10::SymInt> anchor_window_shape(const at::Tensor& values, const AnchorWindowSizes& n,
                                             size_t k) {
  std::vector<c10::SymInt> shape{n.B, n.streams[k].W};
  for (int64_t d = 1; d < values.dim(); ++d)
    shape.push_back(values.sym_size(d));
  return shape;
}

std::vector<c10::SymInt> anchor_row_shape(const at::Tensor& rows, const AnchorWindowSizes& n) {
  std::vector<c10::SymInt> shape{n.B};
  for (int64_t d = 1; d < rows.dim(); ++d)
    shape.push_back(rows.sym_size(d));
  return shape;
}

}  // namespace robocache
