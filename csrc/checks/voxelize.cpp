// The symbolic check of robocache::voxelize and robocache::_voxelize_backward,
// shared by the CPU, CUDA and Meta kernels.
#include <c10/util/safe_numerics.h>

#include <climits>
#include <cmath>

#include "common.h"

namespace robocache {
namespace {

constexpr const char* kOp = "robocache.voxelize";

// a * b, or false when it does not fit an int64.
bool checked_mul(int64_t a, int64_t b, int64_t* out) {
  return !c10::mul_overflows(a, b, out);
}

Reduce parse_reduce(c10::string_view reduce) {
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
  ROBOCACHE_CHECK_VALUE(false, kOp,
                        ": reduce must be 'occupancy', 'count', 'sum', 'mean' or 'max'; got '",
                        std::string(reduce), "'");
  return Reduce::Occupancy;  // not reached
}

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

// Validate voxelize's arguments; messages name the argument and what it got.
VoxelizeSizes check_voxelize_inputs(const at::Tensor& points,
                                    const std::optional<at::Tensor>& features,
                                    const std::optional<at::Tensor>& lengths,
                                    c10::SymIntArrayRef grid_size, at::ArrayRef<double> voxel_size,
                                    at::ArrayRef<double> origin, Reduce reduce,
                                    const std::optional<at::Tensor>& voxel_size_tensor,
                                    const std::optional<at::Tensor>& origin_tensor) {
  const std::string op = kOp;
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

// The voxelize result's shape: (B,) X, Y, Z for occupancy and count,
// (B,) C, X, Y, Z for the feature reductions (B only when batched).
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

}  // namespace

VoxelizeChecked check_voxelize(const at::Tensor& points, const std::optional<at::Tensor>& features,
                               const std::optional<at::Tensor>& lengths,
                               c10::SymIntArrayRef grid_size, at::ArrayRef<double> voxel_size,
                               at::ArrayRef<double> origin, c10::string_view reduce,
                               const std::optional<at::Tensor>& voxel_size_tensor,
                               const std::optional<at::Tensor>& origin_tensor) {
  VoxelizeChecked checked;
  checked.reduce = parse_reduce(reduce);
  checked.sizes = check_voxelize_inputs(points, features, lengths, grid_size, voxel_size, origin,
                                        checked.reduce, voxel_size_tensor, origin_tensor);
  checked.result_shape = voxelize_result_shape(checked.sizes, grid_size, checked.reduce);
  return checked;
}

VoxelizeChecked check_voxelize_backward(
    const at::Tensor& grad, const at::Tensor& points, const at::Tensor& features,
    const std::optional<at::Tensor>& lengths, c10::SymIntArrayRef grid_size,
    at::ArrayRef<double> voxel_size, at::ArrayRef<double> origin, c10::string_view reduce,
    const at::Tensor& result, const std::optional<at::Tensor>& voxel_size_tensor,
    const std::optional<at::Tensor>& origin_tensor) {
  VoxelizeChecked checked = check_voxelize(points, features, lengths, grid_size, voxel_size, origin,
                                           reduce, voxel_size_tensor, origin_tensor);
  const char* op = kOp;
  ROBOCACHE_CHECK_VALUE(reduce_needs_features(checked.reduce), op,
                        ": only sum, mean and max have a gradient; got reduce='",
                        checked.reduce == Reduce::Count ? "count" : "occupancy", "'");
  const auto& shape = checked.result_shape;
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
  return checked;
}

VoxelInputs voxelize_inputs(const VoxelizeChecked& checked, const at::Tensor& points,
                            const std::optional<at::Tensor>& features,
                            const std::optional<at::Tensor>& lengths, at::IntArrayRef grid_size,
                            at::ArrayRef<double> voxel_size, at::ArrayRef<double> origin,
                            const std::optional<at::Tensor>& voxel_size_tensor,
                            const std::optional<at::Tensor>& origin_tensor, bool host_lengths) {
  if (host_lengths && lengths.has_value()) {
    check_lengths_in_range(*lengths, 0, checked.sizes.N.expect_int(), "N", kOp);
  }
  return prepare_voxel_inputs(points, features, lengths, grid_size, voxel_size, origin,
                              checked.reduce, voxel_size_tensor, origin_tensor);
}

}  // namespace robocache
