#include "robocache/error.h"
#include "robocache/checks.h"

#include <c10/core/SymBool.h>
#include <c10/util/Exception.h>
#include <c10/util/safe_numerics.h>

#include <climits>
#include <cmath>

#include <string>

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

namespace {

bool is_value_dtype(at::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kHalf || t == at::kBFloat16;
}

bool is_time_dtype(at::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kLong;
}

std::string shape_str(const at::Tensor& t) {
  return message(t.sym_sizes());
}

// "linear" from " linear "; inner spaces stay ("li near" is no mode).
std::string trimmed(const std::string& s) {
  const auto begin = s.find_first_not_of(' ');
  if (begin == std::string::npos)
    return std::string();
  return s.substr(begin, s.find_last_not_of(' ') - begin + 1);
}

// a * b, or false when it does not fit an int64.
bool checked_mul(int64_t a, int64_t b, int64_t* out) {
  return !c10::mul_overflows(a, b, out);
}

}  // namespace

ResampleSizes check_resample_inputs(const at::Tensor& values, const at::Tensor& times,
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

InterpSizes check_interp_inputs(at::TensorList values, at::TensorList times,
                                const at::Tensor& query_times,
                                const std::vector<std::optional<at::Tensor>>& lengths,
                                const std::string& op) {
  ROBOCACHE_CHECK_VALUE(!values.empty(), op, ": needs at least one stream; got an empty list");
  ROBOCACHE_CHECK_VALUE(values.size() == times.size(), op, ": got ", values.size(),
                        " values tensors but ", times.size(), " times tensors");
  ROBOCACHE_CHECK_VALUE(lengths.size() == values.size(), op, ": got ", lengths.size(),
                        " lengths entries for ", values.size(), " streams");
  InterpSizes total{0, 0, 0};
  for (size_t k = 0; k < values.size(); ++k) {
    const std::string where = op + ": stream " + std::to_string(k);
    if (k > 0) {
      ROBOCACHE_CHECK_TYPE(values[k].scalar_type() == values[0].scalar_type(), where,
                           ": values dtype ", values[k].scalar_type(), " differs from stream 0's ",
                           values[0].scalar_type(), "; all streams' values must share one dtype");
      ROBOCACHE_CHECK_TYPE(times[k].scalar_type() == times[0].scalar_type(), where,
                           ": times dtype ", times[k].scalar_type(), " differs from stream 0's ",
                           times[0].scalar_type(), "; all streams' times must share one dtype");
      ROBOCACHE_CHECK_VALUE(values[k].device() == values[0].device(), where, ": values are on ",
                            values[k].device(), " but stream 0's are on ", values[0].device());
    }
    const auto n = check_resample_inputs(values[k], times[k], query_times, lengths[k], where);
    if (k == 0) {
      total.B = n.B;
      total.T = n.T;
    } else {
      ROBOCACHE_SYM_CHECK(n.B.sym_eq(total.B), where, ": values has batch size ", n.B,
                          " but stream 0 has ", total.B);
    }
    total.D_total = total.D_total + n.D;
  }
  return total;
}

std::vector<std::optional<at::Tensor>> lengths_per_stream(const std::optional<at::Tensor>& lengths,
                                                          size_t K, const std::string& op) {
  std::vector<std::optional<at::Tensor>> out(K);
  if (!lengths.has_value())
    return out;
  const at::Tensor& len = *lengths;
  ROBOCACHE_CHECK_VALUE(len.dim() == 2 && len.sym_size(0) == int64_t(K), op,
                        ": lengths must be (K, B) with one row per stream (K = ", K,
                        "); got shape ", shape_str(len));
  for (size_t k = 0; k < K; ++k)
    out[k] = len.select(0, int64_t(k));
  return out;
}

std::vector<Mode> modes_per_stream(c10::string_view modes, size_t K, const std::string& op) {
  std::vector<std::string> tokens;
  std::string current;
  for (char c : modes) {
    if (c == ',') {
      tokens.push_back(trimmed(current));
      current.clear();
    } else {
      current += c;
    }
  }
  tokens.push_back(trimmed(current));
  ROBOCACHE_CHECK_VALUE(tokens.size() == 1 || tokens.size() == K, op,
                        ": modes must be one mode or one per stream, comma-separated; got ",
                        tokens.size(), " modes ('", std::string(modes), "') for ", K, " streams");
  std::vector<Mode> out(K);
  for (size_t k = 0; k < K; ++k) {
    const size_t j = tokens.size() == 1 ? 0 : k;
    const std::string arg = "modes[" + std::to_string(j) + "]";
    out[k] = parse_mode(tokens[j], ModeSet::Interp, op.c_str(), arg.c_str());
  }
  return out;
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

Reduce parse_reduce(c10::string_view reduce, const char* op) {
  if (reduce == "occupancy")
    return Reduce::Occupancy;
  if (reduce == "count")
    return Reduce::Count;
  if (reduce == "sum")
    return Reduce::Sum;
  if (reduce == "mean")
    return Reduce::Mean;
  if (reduce == "max")
    return Reduce::Max;
  ROBOCACHE_CHECK_VALUE(false, op,
                        ": reduce must be 'occupancy', 'count', 'sum', 'mean' or 'max'; got '",
                        std::string(reduce), "'");
  return Reduce::Occupancy;  // not reached
}

namespace {

// Sizes that hold concrete values (always on CPU and CUDA; under tracing,
// the ones not symbolic): the grid and the result must be addressable in
// int64, and the per-voxel counters (int32: count's output, mean's counts,
// max's winning point) must not wrap.
void check_voxelize_sizes(const VoxelizeSizes& n, c10::SymIntArrayRef grid_size, Reduce reduce,
                          const std::string& op) {
  int64_t elements = 1;
  bool concrete = true;
  std::vector<c10::SymInt> dims{n.B, n.C == 0 ? c10::SymInt(1) : n.C};
  for (const auto& g : grid_size)
    dims.push_back(g);
  for (const auto& d : dims) {
    const auto value = d.maybe_as_int();
    if (!value) {
      concrete = false;
      continue;
    }
    ROBOCACHE_CHECK_VALUE(checked_mul(elements, *value, &elements), op,
                          ": the result has too many elements for int64 (grid_size ", grid_size,
                          " with batch ", n.B, " and ", n.C, " channels); use a smaller grid");
  }
  int64_t bytes = 0;
  ROBOCACHE_CHECK_VALUE(!concrete || checked_mul(elements, 8, &bytes), op,
                        ": the result has too many elements to address (grid_size ", grid_size,
                        "); use a smaller grid");
  const auto points = n.N.maybe_as_int();
  ROBOCACHE_CHECK_VALUE(reduce == Reduce::Occupancy || !points || *points <= int64_t(INT32_MAX), op,
                        ": at most 2^31 - 1 points per cloud for reduce='count', 'sum', 'mean' "
                        "or 'max' (per-voxel counters are int32); got ",
                        *points, " (split the cloud)");
}

// voxel_size_tensor / origin_tensor: floating, on the points' device, (3,)
// (a voxel size also (1,)) or one row per cloud, (B, 3). Their values live on
// the device and are not read here (no host sync): a cloud whose voxel size
// is not positive and finite drops its points.
void check_grid_tensor(const std::optional<at::Tensor>& tensor, const char* name, bool may_be_one,
                       const at::Tensor& points, const VoxelizeSizes& n, const std::string& op) {
  if (!tensor.has_value())
    return;
  const at::Tensor& t = *tensor;
  ROBOCACHE_CHECK_TYPE(t.scalar_type() == at::kFloat || t.scalar_type() == at::kDouble, op, ": ",
                       name, " must be a float32 or float64 tensor; got ", t.scalar_type());
  ROBOCACHE_CHECK_VALUE(t.device() == points.device(), op, ": ", name,
                        " must be on the points' device (", points.device(), "); got ", t.device());
  const bool flat = t.dim() == 1 && (t.sym_size(0) == 3 || (may_be_one && t.sym_size(0) == 1));
  ROBOCACHE_CHECK_VALUE(flat || (t.dim() == 2 && t.sym_size(1) == 3), op, ": ", name,
                        " must be (3,)", may_be_one ? ", (1,)" : "", " or (B, 3) = (", n.B,
                        ", 3); got shape ", shape_str(t));
  if (t.dim() == 2) {
    ROBOCACHE_SYM_CHECK(t.sym_size(0).sym_eq(n.B), op, ": ", name, " has ", t.sym_size(0),
                        " rows but there are ", n.B, " clouds");
  }
}

}  // namespace

VoxelizeSizes check_voxelize_inputs(const at::Tensor& points,
                                    const std::optional<at::Tensor>& features,
                                    const std::optional<at::Tensor>& lengths,
                                    c10::SymIntArrayRef grid_size, at::ArrayRef<double> voxel_size,
                                    at::ArrayRef<double> origin, Reduce reduce,
                                    const std::string& op,
                                    const std::optional<at::Tensor>& voxel_size_tensor,
                                    const std::optional<at::Tensor>& origin_tensor) {
  ROBOCACHE_CHECK_VALUE((points.dim() == 2 || points.dim() == 3) && points.sym_size(-1) == 3, op,
                        ": points must be (B, N, 3) or (N, 3); got shape ", shape_str(points));
  ROBOCACHE_CHECK_TYPE(points.scalar_type() == at::kFloat || points.scalar_type() == at::kDouble,
                       op, ": points must be float32 or float64; got ", points.scalar_type());
  VoxelizeSizes n{points.dim() == 3, points.dim() == 3 ? points.sym_size(0) : c10::SymInt(1),
                  points.sym_size(-2), 0};
  ROBOCACHE_CHECK_VALUE(grid_size.size() == 3, op,
                        ": grid_size must have 3 entries (X, Y, Z); got ", grid_size.size());
  for (size_t a = 0; a < 3; ++a) {
    ROBOCACHE_SYM_CHECK(grid_size[a].sym_gt(0), op, ": grid_size must be positive; got ",
                        grid_size);
  }
  ROBOCACHE_CHECK_VALUE(voxel_size.size() == 1 || voxel_size.size() == 3, op,
                        ": voxel_size must have 1 or 3 entries; got ", voxel_size.size());
  // The kernels divide in the points' dtype: a float32 cloud needs the
  // sizes positive and finite as float32 too (1e-50 or 1e39 are not).
  const bool single = points.scalar_type() == at::kFloat;
  for (double v : voxel_size) {
    const double as_point = single ? double(float(v)) : v;
    ROBOCACHE_CHECK_VALUE(std::isfinite(v) && v > 0, op,
                          ": voxel_size must be positive and finite; got ", voxel_size);
    ROBOCACHE_CHECK_VALUE(std::isfinite(as_point) && as_point > 0, op, ": voxel_size ", v,
                          " is not positive and finite in the points' dtype (float32): ", as_point,
                          "; use float64 points or a representable size");
  }
  ROBOCACHE_CHECK_VALUE(origin.size() == 3, op, ": origin must have 3 entries; got ",
                        origin.size());
  for (double v : origin) {
    ROBOCACHE_CHECK_VALUE(std::isfinite(v) && std::isfinite(single ? double(float(v)) : v), op,
                          ": origin must be finite in the points' dtype; got ", origin);
  }
  if (reduce_needs_features(reduce)) {
    ROBOCACHE_CHECK_VALUE(features.has_value(), op, ": reduce='",
                          reduce == Reduce::Sum    ? "sum"
                          : reduce == Reduce::Mean ? "mean"
                                                   : "max",
                          "' needs features; got None");
  } else {
    ROBOCACHE_CHECK_VALUE(!features.has_value(), op, ": reduce='",
                          reduce == Reduce::Count ? "count" : "occupancy",
                          "' takes no features; got features of shape ",
                          features.has_value() ? shape_str(*features) : std::string());
  }
  if (features.has_value()) {
    const at::Tensor& f = *features;
    ROBOCACHE_CHECK_VALUE(f.dim() == points.dim(), op, ": features must be ",
                          points.dim() == 3 ? "(B, N, C)" : "(N, C)", " like points ",
                          shape_str(points), "; got shape ", shape_str(f));
    ROBOCACHE_CHECK_TYPE(is_value_dtype(f.scalar_type()), op,
                         ": features must be float32, float64, float16 or bfloat16; got ",
                         f.scalar_type());
    ROBOCACHE_CHECK_VALUE(f.device() == points.device(), op,
                          ": features must be on the same device as points; got points on ",
                          points.device(), " and features on ", f.device());
    ROBOCACHE_SYM_CHECK(f.sym_size(-2).sym_eq(n.N), op, ": features has ", f.sym_size(-2),
                        " points but points has ", n.N, "; got points shape ", shape_str(points),
                        " and features shape ", shape_str(f));
    if (n.batched) {
      ROBOCACHE_SYM_CHECK(f.sym_size(0).sym_eq(n.B), op, ": features has batch size ",
                          f.sym_size(0), " but points has ", n.B);
    }
    n.C = f.sym_size(-1);
  }
  if (lengths.has_value()) {
    const at::Tensor& len = *lengths;
    ROBOCACHE_CHECK_TYPE(len.scalar_type() == at::kLong, op, ": lengths must be int64; got ",
                         len.scalar_type());
    ROBOCACHE_CHECK_VALUE(len.dim() == 1, op, ": lengths must be 1-D (B,); got shape ",
                          shape_str(len));
    ROBOCACHE_SYM_CHECK(len.sym_size(0).sym_eq(n.B), op, ": lengths must have B = ", n.B,
                        " entries; got shape ", shape_str(len));
    ROBOCACHE_CHECK_VALUE(len.device() == points.device(), op,
                          ": lengths must be on the same device as points; got points on ",
                          points.device(), " and lengths on ", len.device());
  }
  check_grid_tensor(voxel_size_tensor, "voxel_size", true, points, n, op);
  check_grid_tensor(origin_tensor, "origin", false, points, n, op);
  check_voxelize_sizes(n, grid_size, reduce, op);
  return n;
}

std::vector<c10::SymInt> voxelize_result_shape(const VoxelizeSizes& n,
                                               c10::SymIntArrayRef grid_size, Reduce reduce) {
  std::vector<c10::SymInt> shape;
  if (n.batched)
    shape.push_back(n.B);
  if (reduce_needs_features(reduce))
    shape.push_back(n.C);
  for (const auto& g : grid_size)
    shape.push_back(g);
  return shape;
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

InterpInputs resample_inputs(const at::Tensor& values, const at::Tensor& times,
                             const at::Tensor& query_times,
                             const std::optional<at::Tensor>& lengths, c10::string_view mode,
                             bool host_lengths) {
  constexpr const char* op = "robocache.resample";
  const Mode m = parse_mode(mode, ModeSet::Interp, op);
  check_resample_inputs(values, times, query_times, lengths, op);
  if (host_lengths && lengths.has_value()) {
    check_lengths_in_range(*lengths, 1, values.size(1), "S", op);
  }
  return prepare_interp_inputs({values}, {times}, query_times, {lengths}, {m});
}

FuseChecked check_fuse_inputs(at::TensorList values, at::TensorList times,
                              const at::Tensor& query_times,
                              const std::optional<at::Tensor>& lengths, c10::string_view modes) {
  constexpr const char* op = "robocache.fuse";
  ROBOCACHE_CHECK_VALUE(!values.empty(), op, ": needs at least one stream; got an empty list");
  FuseChecked out;
  out.lengths = lengths_per_stream(lengths, values.size(), op);
  out.modes = modes_per_stream(modes, values.size(), op);
  out.sizes = check_interp_inputs(values, times, query_times, out.lengths, op);
  return out;
}

InterpInputs fuse_inputs(at::TensorList values, at::TensorList times, const at::Tensor& query_times,
                         const std::optional<at::Tensor>& lengths, c10::string_view modes,
                         bool host_lengths) {
  constexpr const char* op = "robocache.fuse";
  auto checked = check_fuse_inputs(values, times, query_times, lengths, modes);
  const auto& len = checked.lengths;
  for (size_t k = 0; host_lengths && k < len.size(); ++k) {
    if (len[k].has_value()) {
      check_lengths_in_range(*len[k], 1, values[k].size(1), "S",
                             std::string(op) + ": stream " + std::to_string(k));
    }
  }
  return prepare_interp_inputs(values, times, query_times, len, std::move(checked.modes));
}

void check_backward_args(const InterpInputs& in, const at::Tensor& grad_out, size_t num_values_grad,
                         bool query_grad, const char* op) {
  ROBOCACHE_CHECK_VALUE(num_values_grad == in.values.size(), op, ": values_grad has ",
                        num_values_grad, " entries for ", in.values.size(), " streams");
  int64_t total = 0;
  column_offsets(in, &total);
  check_grad_out(grad_out, in.values[0].size(0), in.query.size(-1), total, op);
  check_query_grad(in.query, query_grad, op);
}

VoxelInputs voxelize_inputs(const at::Tensor& points, const std::optional<at::Tensor>& features,
                            const std::optional<at::Tensor>& lengths, at::IntArrayRef grid_size,
                            at::ArrayRef<double> voxel_size, at::ArrayRef<double> origin,
                            c10::string_view reduce_str,
                            const std::optional<at::Tensor>& voxel_size_tensor,
                            const std::optional<at::Tensor>& origin_tensor, bool host_lengths) {
  constexpr const char* op = "robocache.voxelize";
  const Reduce reduce = parse_reduce(reduce_str, op);
  const auto n =
      check_voxelize_inputs(points, features, lengths, c10::fromIntArrayRefSlow(grid_size),
                            voxel_size, origin, reduce, op, voxel_size_tensor, origin_tensor);
  if (host_lengths && lengths.has_value()) {
    check_lengths_in_range(*lengths, 0, n.N.expect_int(), "N", op);
  }
  return prepare_voxel_inputs(points, features, lengths, grid_size, voxel_size, origin, reduce,
                              voxel_size_tensor, origin_tensor);
}

void check_voxelize_grad(const at::Tensor& grad, const at::Tensor& result, const VoxelizeSizes& n,
                         c10::SymIntArrayRef grid_size, Reduce reduce, const std::string& op) {
  ROBOCACHE_CHECK_VALUE(reduce_needs_features(reduce), op,
                        ": only sum, mean and max have a gradient; got reduce='",
                        reduce == Reduce::Count ? "count" : "occupancy", "'");
  const auto shape = voxelize_result_shape(n, grid_size, reduce);
  for (const auto* t : {&grad, &result}) {
    const char* name = t == &grad ? "grad" : "result";
    bool same = t->dim() == int64_t(shape.size());
    for (size_t d = 0; same && d < shape.size(); ++d) {
      ROBOCACHE_SYM_CHECK(t->sym_size(int64_t(d)).sym_eq(shape[d]), op, ": ", name,
                          " must have the result's shape ", shape, "; got ", shape_str(*t));
    }
    ROBOCACHE_CHECK_VALUE(same, op, ": ", name, " must have the result's shape ", shape, "; got ",
                          shape_str(*t));
  }
}

void check_voxelize_backward_args(const VoxelInputs& in, const at::Tensor& grad,
                                  const at::Tensor& result, c10::string_view reduce) {
  (void)reduce;
  const VoxelizeSizes n{in.batched, in.B(), in.N(), in.C()};
  const std::vector<c10::SymInt> grid{in.grid[0], in.grid[1], in.grid[2]};
  check_voxelize_grad(grad, result, n, grid, in.reduce, "robocache.voxelize");
}

}  // namespace robocache
