// The symbolic check of robocache::draw_mixture, shared by the CPU, CUDA and
// Meta kernels (sizes only: no data is read, so it runs under fake tensors).
#include "common.h"

namespace robocache {

DrawMixtureChecked check_draw_mixture(const at::Tensor& base, const c10::SymInt& batch_size,
                                      const at::Tensor& weights, const at::Tensor& counts) {
  const char* op = "robocache.draw_mixture";
  ROBOCACHE_CHECK_TYPE(weights.scalar_type() == at::kDouble, op, ": weights must be float64; got ",
                       weights.scalar_type());
  ROBOCACHE_CHECK_VALUE(weights.dim() == 1, op,
                        ": weights must be 1-D (S,): one per store; got shape ",
                        shape_str(weights));
  check_index_tensor(base, "base", 1, "(1,): the first window's key", weights, "weights", op);
  check_index_tensor(counts, "counts", 1, "(S,): each store's anchors", weights, "weights", op);
  const c10::SymInt S = weights.sym_size(0);
  ROBOCACHE_SYM_CHECK(S.sym_ge(1), op, ": weights must name at least one store; got shape ",
                      shape_str(weights));
  ROBOCACHE_SYM_CHECK(counts.sym_size(0).sym_eq(S), op,
                      ": counts must have one entry per store (S = ", S, "); got shape ",
                      shape_str(counts));
  ROBOCACHE_SYM_CHECK(base.sym_size(0).sym_eq(1), op,
                      ": base must hold one key, shape (1,); got shape ", shape_str(base));
  ROBOCACHE_SYM_CHECK(batch_size.sym_ge(0), op, ": batch_size must be >= 0; got ", batch_size);
  return {batch_size, S};
}

}  // namespace robocache
