// The rows that batches of windows read from a mapped key, found on the host
// over row numbers, and each batch's rows packed as a small stream with the
// same episodes (torch.classes.robocache.WindowRows, one a timeline and
// rule); and an epoch's batches' rows found a chunk of batches at a time
// (torch.classes.robocache.EpochRows), by the caller or by the mapped
// feed's own thread.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/custom_class.h>

#include <string>
#include <tuple>
#include <vector>

namespace robocache::io {

class WindowRows : public torch::CustomClassHolder {
 public:
  // A timeline (times (N,) int64 and its episodes' offsets (E + 1,) int64,
  // CPU) cut in `mode` at `deltas` ((W,) int64 ns, CPU); "mean" windows
  // reach back `interval` ns.
  WindowRows(at::Tensor times, at::Tensor offsets, at::Tensor deltas, std::string mode,
             int64_t interval);

  // The sorted rows each batch of `index` (anchor-stream rows, CPU; batches
  // of batch_size in turn) reads, as the cut over row numbers finds them:
  // each window's row at or before each query (the first row for a query
  // before it) and the row after it, its episode's first and last rows,
  // and for "mean" every row of each query's interval. Returns (rows,
  // bounds): batch b's rows rows[bounds[b]:bounds[b + 1]].
  std::tuple<at::Tensor, at::Tensor> rows_of(const at::Tensor& index,
                                             const at::Tensor& anchor_offsets,
                                             const at::Tensor& anchor_times, int64_t edge_tolerance,
                                             int64_t batch_size) const;

  // Each batch's index of its packed stream (rows_of's batches): (offsets
  // (batches, E + 1): each episode's offset in the batch's rows; times: the
  // rows' times).
  std::tuple<at::Tensor, at::Tensor> indexes(const at::Tensor& rows,
                                             const at::Tensor& bounds) const;

 private:
  // ((B * W) rows at or before each query at deltas, (B,) episodes).
  std::tuple<at::Tensor, at::Tensor> previous(const at::Tensor& deltas, const at::Tensor& index,
                                              const at::Tensor& anchor_offsets,
                                              const at::Tensor& anchor_times,
                                              int64_t edge_tolerance) const;

  at::Tensor times_, offsets_, deltas_, row_numbers_;
  bool mean_ = false;
  int64_t interval_ = 0;
};

class EpochRows : public torch::CustomClassHolder {
 public:
  // An epoch's batches of `batch_size` anchor rows `anchors` (CPU int64, in
  // order), cut by each of `windows` from the anchor stream (its episodes'
  // offsets and times, CPU), `chunk_batches` batches at a time.
  EpochRows(std::vector<c10::intrusive_ptr<WindowRows>> windows, at::Tensor anchors,
            at::Tensor anchor_offsets, at::Tensor anchor_times, int64_t edge_tolerance,
            int64_t batch_size, int64_t chunk_batches);

  // The chunk of batches that batch b is in: (its first batch, and for each
  // of the windows its rows, bounds, offsets and times: rows_of and indexes).
  std::tuple<int64_t, std::vector<at::Tensor>, std::vector<at::Tensor>, std::vector<at::Tensor>,
             std::vector<at::Tensor>>
  chunk(int64_t b) const;

  int64_t batches() const;
  // The finders whose rows it finds (its windows).
  int64_t finders() const { return static_cast<int64_t>(windows_.size()); }

 private:
  std::vector<c10::intrusive_ptr<WindowRows>> windows_;
  at::Tensor anchors_, anchor_offsets_, anchor_times_;
  int64_t edge_tolerance_, batch_size_, chunk_batches_;
};

}  // namespace robocache::io
