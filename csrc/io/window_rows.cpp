// torch.classes.robocache.WindowRows and EpochRows (window_rows.h).
#include "window_rows.h"

#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/sub.h>
#include <torch/library.h>

#include <algorithm>
#include <utility>

#include "../cpu/windows_cpu.h"
#include "register.h"
#include "robocache/error.h"

namespace robocache::io {

namespace {

void check_index_tensor(const at::Tensor& t, const char* where, const char* name) {
  ROBOCACHE_CHECK_VALUE(t.is_cpu() && t.scalar_type() == at::kLong && t.dim() == 1, where, ": ",
                        name, " must be a 1-D int64 CPU tensor; got ", t.scalar_type(), " ",
                        t.sizes(), " on ", t.device());
}

}  // namespace

WindowRows::WindowRows(at::Tensor times, at::Tensor offsets, at::Tensor deltas, std::string mode,
                       int64_t interval)
    : times_(times.contiguous()),
      offsets_(offsets.contiguous()),
      deltas_(deltas.contiguous()),
      mean_(mode == "mean"),
      interval_(interval) {
  check_index_tensor(times_, "WindowRows", "times");
  check_index_tensor(offsets_, "WindowRows", "offsets");
  check_index_tensor(deltas_, "WindowRows", "deltas");
  ROBOCACHE_CHECK_VALUE(mode == "nearest" || mode == "previous" || mode == "linear" || mean_,
                        "WindowRows: mode must be 'nearest', 'previous', 'linear' or 'mean'; got '",
                        mode, "'");
  ROBOCACHE_CHECK_VALUE(offsets_.numel() >= 1, "WindowRows: offsets must hold at least one entry");
  row_numbers_ = at::arange(times_.numel(), times_.options()).view({-1, 1});
}

std::tuple<at::Tensor, at::Tensor> WindowRows::previous(const at::Tensor& deltas,
                                                        const at::Tensor& index,
                                                        const at::Tensor& anchor_offsets,
                                                        const at::Tensor& anchor_times,
                                                        int64_t edge_tolerance) const {
  const int64_t no_interval = 0;
  auto found =
      anchor_windows_cpu({row_numbers_}, {times_}, {offsets_}, {deltas}, anchor_offsets,
                         anchor_times, index, {}, "previous", {no_interval}, {}, edge_tolerance);
  return {std::get<0>(found)[0].contiguous().view({-1}), std::get<3>(found).contiguous()};
}

std::tuple<at::Tensor, at::Tensor> WindowRows::rows_of(const at::Tensor& index,
                                                       const at::Tensor& anchor_offsets,
                                                       const at::Tensor& anchor_times,
                                                       int64_t edge_tolerance,
                                                       int64_t batch_size) const {
  check_index_tensor(index, "WindowRows.rows_of", "index");
  ROBOCACHE_CHECK_VALUE(batch_size >= 1, "WindowRows.rows_of: batch_size must be >= 1; got ",
                        batch_size);
  const auto [held_t, episode_t] =
      previous(deltas_, index, anchor_offsets, anchor_times, edge_tolerance);
  at::Tensor low_t;
  if (mean_) {
    low_t = std::get<0>(
        previous(at::sub(deltas_, interval_), index, anchor_offsets, anchor_times, edge_tolerance));
  }
  const int64_t n = index.numel(), width = deltas_.numel(), count = times_.numel();
  const int64_t batches = (n + batch_size - 1) / batch_size;
  const int64_t* held = held_t.data_ptr<int64_t>();
  const int64_t* low = mean_ ? low_t.data_ptr<int64_t>() : nullptr;
  const int64_t* episode = episode_t.data_ptr<int64_t>();
  const int64_t* offsets = offsets_.data_ptr<int64_t>();
  at::Tensor bounds_t = at::empty({batches + 1}, index.options());
  int64_t* bounds = bounds_t.data_ptr<int64_t>();
  std::vector<int64_t> rows, batch;
  rows.reserve(static_cast<size_t>(n * (2 * width + 2)));
  const auto add = [&](int64_t row) {
    if (row >= 0 && row < count) {
      batch.push_back(row);
    }
  };
  bounds[0] = 0;
  for (int64_t b = 0; b < batches; ++b) {
    batch.clear();
    for (int64_t a = b * batch_size; a < std::min(n, (b + 1) * batch_size); ++a) {
      const int64_t e = std::max<int64_t>(episode[a], 0);
      const int64_t first = offsets[e], last = offsets[e + 1] - 1;
      add(first);
      add(last);
      for (int64_t w = 0; w < width; ++w) {
        const int64_t at = held[a * width + w];
        add(at);
        add(std::min(at + 1, std::max<int64_t>(last, 0)));
        if (low != nullptr) {  // every row of (q - interval, q]
          const int64_t from = low[a * width + w];
          for (int64_t r = from; r <= std::max(at, from); ++r) {
            add(r);
          }
        }
      }
    }
    std::sort(batch.begin(), batch.end());
    rows.insert(rows.end(), batch.begin(), std::unique(batch.begin(), batch.end()));
    bounds[b + 1] = static_cast<int64_t>(rows.size());
  }
  at::Tensor rows_t = at::empty({static_cast<int64_t>(rows.size())}, index.options());
  std::copy(rows.begin(), rows.end(), rows_t.data_ptr<int64_t>());
  return {rows_t, bounds_t};
}

std::tuple<at::Tensor, at::Tensor> WindowRows::indexes(const at::Tensor& rows_t,
                                                       const at::Tensor& bounds_t) const {
  check_index_tensor(rows_t, "WindowRows.indexes", "rows");
  check_index_tensor(bounds_t, "WindowRows.indexes", "bounds");
  const at::Tensor rows_c = rows_t.contiguous(), bounds_c = bounds_t.contiguous();
  const int64_t batches = bounds_c.numel() - 1, edges = offsets_.numel();
  ROBOCACHE_CHECK_VALUE(batches >= 0, "WindowRows.indexes: bounds must not be empty");
  const int64_t* rows = rows_c.data_ptr<int64_t>();
  const int64_t* bounds = bounds_c.data_ptr<int64_t>();
  const int64_t* offsets = offsets_.data_ptr<int64_t>();
  for (int64_t b = 0; b < batches; ++b) {
    ROBOCACHE_CHECK_VALUE(
        bounds[b] >= 0 && bounds[b] <= bounds[b + 1] && bounds[b + 1] <= rows_c.numel(),
        "WindowRows.indexes: bounds must rise within 0..", rows_c.numel());
  }
  at::Tensor index_t = at::empty({batches, edges}, bounds_c.options());
  int64_t* index = index_t.data_ptr<int64_t>();
  for (int64_t b = 0; b < batches; ++b) {
    const int64_t* begin = rows + bounds[b];
    const int64_t* end = rows + bounds[b + 1];
    for (int64_t e = 0; e < edges; ++e) {
      index[b * edges + e] = std::lower_bound(begin, end, offsets[e]) - begin;
    }
  }
  return {index_t, times_.index_select(0, rows_c)};
}

EpochRows::EpochRows(std::vector<c10::intrusive_ptr<WindowRows>> windows, at::Tensor anchors,
                     at::Tensor anchor_offsets, at::Tensor anchor_times, int64_t edge_tolerance,
                     int64_t batch_size, int64_t chunk_batches)
    : windows_(std::move(windows)),
      anchors_(anchors.contiguous()),
      anchor_offsets_(std::move(anchor_offsets)),
      anchor_times_(std::move(anchor_times)),
      edge_tolerance_(edge_tolerance),
      batch_size_(batch_size),
      chunk_batches_(chunk_batches) {
  check_index_tensor(anchors_, "EpochRows", "anchors");
  ROBOCACHE_CHECK_VALUE(batch_size_ >= 1 && chunk_batches_ >= 1,
                        "EpochRows: batch_size and chunk_batches must be >= 1; got ", batch_size_,
                        " and ", chunk_batches_);
}

int64_t EpochRows::batches() const {
  return (anchors_.numel() + batch_size_ - 1) / batch_size_;
}

std::tuple<int64_t, std::vector<at::Tensor>, std::vector<at::Tensor>, std::vector<at::Tensor>,
           std::vector<at::Tensor>>
EpochRows::chunk(int64_t b) const {
  ROBOCACHE_CHECK_VALUE(b >= 0 && b < batches(), "EpochRows.chunk: batch ", b,
                        " is not in the epoch (", batches(), " batches)");
  const int64_t first = b - b % chunk_batches_;
  const int64_t begin = first * batch_size_;
  const int64_t end = std::min(anchors_.numel(), (first + chunk_batches_) * batch_size_);
  const at::Tensor index = anchors_.narrow(0, begin, end - begin);
  std::vector<at::Tensor> rows, bounds, offsets, times;
  for (const auto& window : windows_) {
    auto [r, bound] =
        window->rows_of(index, anchor_offsets_, anchor_times_, edge_tolerance_, batch_size_);
    auto [offset, time] = window->indexes(r, bound);
    rows.push_back(std::move(r));
    bounds.push_back(std::move(bound));
    offsets.push_back(std::move(offset));
    times.push_back(std::move(time));
  }
  return {first, std::move(rows), std::move(bounds), std::move(offsets), std::move(times)};
}

void register_window_rows(torch::Library& m) {
  m.class_<WindowRows>("WindowRows")
      .def(torch::init<at::Tensor, at::Tensor, at::Tensor, std::string, int64_t>())
      .def("rows_of", &WindowRows::rows_of)
      .def("indexes", &WindowRows::indexes);
  m.class_<EpochRows>("EpochRows")
      .def(torch::init<std::vector<c10::intrusive_ptr<WindowRows>>, at::Tensor, at::Tensor,
                       at::Tensor, int64_t, int64_t, int64_t>())
      .def("chunk", &EpochRows::chunk)
      .def("batches", &EpochRows::batches);
}

}  // namespace robocache::io
