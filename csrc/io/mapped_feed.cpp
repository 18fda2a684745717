// An iteration's mapped rows fed to the sampler's CUDA graphs with one
// native call a batch: torch.classes.robocache.MappedFeed (CUDA builds
// only). The rows each batch reads are found a chunk of batches at a time
// on the host and handed over once a chunk; then each batch's call waits
// for its rows, copies them into the graphs' buffers (RowStaging) and hands
// the read of a later batch to the row reader, into a ring slot (RowRing)
// that the GPU is done copying from.
#if defined(ROBOCACHE_WITH_CUDA)

#include <ATen/core/Tensor.h>
#include <torch/custom_class.h>
#include <torch/library.h>

#include <exception>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "register.h"
#include "robocache/error.h"
#include "row_reader.h"
#include "row_staging.h"

namespace robocache::io {

class MappedFeed : public torch::CustomClassHolder {
 public:
  // For each finder f (the keys sharing one timeline and rule): its rows in
  // the file fds[f] of row_counts[f] rows, key k's row r at byte
  // begins[f][k] + r * row_bytes[f][k], landing in the ring slot's buffer f
  // at starts[f][k] (laid out for rooms[f] rows, the batch's index first);
  // ends[f] is where its last key's rows begin and last_bytes[f] a row of
  // it, so a batch of n rows fills ends[f] + n * last_bytes[f] bytes.
  MappedFeed(c10::intrusive_ptr<RowRing> ring, c10::intrusive_ptr<RowReader> reader,
             std::vector<int64_t> fds, std::vector<int64_t> row_counts,
             std::vector<std::vector<int64_t>> begins, std::vector<std::vector<int64_t>> row_bytes,
             std::vector<std::vector<int64_t>> starts, std::vector<int64_t> rooms,
             std::vector<int64_t> ends, std::vector<int64_t> last_bytes)
      : ring_(std::move(ring)),
        reader_(std::move(reader)),
        fds_(std::move(fds)),
        row_counts_(std::move(row_counts)),
        begins_(std::move(begins)),
        row_bytes_(std::move(row_bytes)),
        starts_(std::move(starts)),
        rooms_(std::move(rooms)),
        ends_(std::move(ends)),
        last_bytes_(std::move(last_bytes)) {
    const size_t count = static_cast<size_t>(ring_->finders());
    for (const size_t size : {fds_.size(), row_counts_.size(), begins_.size(), row_bytes_.size(),
                              starts_.size(), rooms_.size(), ends_.size(), last_bytes_.size()}) {
      ROBOCACHE_CHECK_VALUE(size == count, "MappedFeed: each finder's arguments must have one ",
                            "entry a buffer of the ring's slots (", count, "); got ", size);
    }
    for (size_t f = 0; f < count; ++f) {
      ROBOCACHE_CHECK_VALUE(rooms_[f] >= 0 && ends_[f] >= 0 && last_bytes_[f] >= 0,
                            "MappedFeed: finder ", f, ": rooms, ends and last_bytes must be >= 0");
    }
  }

  // The rows of batches first.. (each finder's rows_of and indexes): batch
  // first + k reads rows[f][bounds[f][k]:bounds[f][k + 1]], its index
  // offsets[f][k] and the rows' times times[f][bounds[f][k]:bounds[f][k + 1]].
  void chunk(int64_t first, std::vector<at::Tensor> rows, std::vector<at::Tensor> bounds,
             std::vector<at::Tensor> offsets, std::vector<at::Tensor> times) {
    const size_t count = fds_.size();
    ROBOCACHE_CHECK_VALUE(rows.size() == count && bounds.size() == count &&
                              offsets.size() == count && times.size() == count,
                          "MappedFeed.chunk: rows, bounds, offsets and times must have one entry ",
                          "a finder (", count, ")");
    int64_t batches = -1;
    for (size_t f = 0; f < count; ++f) {
      const at::Tensor& bound = bounds[f];
      ROBOCACHE_CHECK_VALUE(bound.is_cpu() && bound.scalar_type() == at::kLong &&
                                bound.dim() == 1 && bound.is_contiguous() && bound.numel() >= 1,
                            "MappedFeed.chunk: bounds[", f,
                            "] must be a non-empty contiguous 1-D int64 CPU tensor");
      batches = f == 0 ? bound.numel() - 1 : batches;
      ROBOCACHE_CHECK_VALUE(bound.numel() - 1 == batches, "MappedFeed.chunk: bounds[", f,
                            "] holds ", bound.numel() - 1, " batches, bounds[0] ", batches);
      const int64_t* b = bound.data_ptr<int64_t>();
      const int64_t total = rows[f].numel();
      bool rising = b[0] == 0 && b[batches] == total;
      for (int64_t k = 0; rising && k < batches; ++k) {
        rising = b[k] <= b[k + 1];
      }
      ROBOCACHE_CHECK_VALUE(rising, "MappedFeed.chunk: bounds[", f,
                            "] must rise from 0 to its rows' length (", total, ")");
      ROBOCACHE_CHECK_VALUE(times[f].is_cpu() && times[f].dim() == 1 && times[f].numel() == total &&
                                times[f].element_size() == 8 && times[f].is_contiguous(),
                            "MappedFeed.chunk: times[", f,
                            "] must be a contiguous 1-D CPU tensor of 8-byte times, one a row (",
                            total, ")");
      ROBOCACHE_CHECK_VALUE(offsets[f].is_cpu() && offsets[f].scalar_type() == at::kLong &&
                                offsets[f].dim() == 2 && offsets[f].size(0) == batches &&
                                offsets[f].is_contiguous(),
                            "MappedFeed.chunk: offsets[", f,
                            "] must be a contiguous (batches, edges) int64 CPU tensor");
    }
    first_ = first;
    rows_ = std::move(rows);
    bounds_ = std::move(bounds);
    offsets_ = std::move(offsets);
    times_ = std::move(times);
    batches_ = batches;
  }

  // Hands the read of batch b (of the chunk) over, into its ring slot, once
  // the GPU is done copying from that slot.
  void hand(int64_t b) {
    ROBOCACHE_CHECK_VALUE(b >= first_ && b < first_ + batches_, "MappedFeed.hand: batch ", b,
                          " is not in the chunk (batches ", first_, "..", first_ + batches_ - 1,
                          ")");
    const int64_t slot = ring_->slot_of(b);
    for (const auto& [other, _] : handed_) {
      ROBOCACHE_CHECK_VALUE(ring_->slot_of(other) != slot, "MappedFeed.hand: batch ", b,
                            other == b ? " is handed over already"
                                       : " would read into the slot of a batch not yet waited "
                                         "for (batch ",
                            other == b ? "" : std::to_string(other) + "): the ring is too small");
    }
    ring_->take(slot);
    const std::vector<at::Tensor>& buffers = ring_->buffers(slot);
    const int64_t k = b - first_;
    Handed handed;
    try {
      for (size_t f = 0; f < fds_.size(); ++f) {
        const int64_t* bound = bounds_[f].data_ptr<int64_t>();
        const int64_t count = bound[k + 1] - bound[k];
        ROBOCACHE_CHECK_VALUE(count <= rooms_[f], "MappedFeed.hand: batch ", b, " reads ", count,
                              " rows of finder ", f, ", its buffer holds ", rooms_[f]);
        const std::vector<at::Tensor> head = {offsets_[f].select(0, k),
                                              times_[f].narrow(0, bound[k], count)};
        handed.tickets.push_back(
            reader_->submit_unwoken(fds_[f], row_counts_[f], rows_[f].narrow(0, bound[k], count),
                                    begins_[f], row_bytes_[f], buffers[f], starts_[f], head));
        handed.sizes.push_back(ends_[f] + count * last_bytes_[f]);
        handed.counts.push_back(count);
      }
    } catch (...) {
      for (const int64_t ticket : handed.tickets) {  // no read left behind
        try {
          reader_->wait(ticket);
        } catch (...) {
        }
      }
      throw;
    }
    reader_->wake();  // once for every finder's read
    handed_.emplace(b, std::move(handed));
  }

  // Waits for batch b's reads (every one, then the first error raised):
  // (the first finder whose file ended inside its rows, or -1; the bytes
  // each finder's buffer holds; the rows each finder read).
  std::tuple<int64_t, std::vector<int64_t>, std::vector<int64_t>> wait(int64_t b) {
    auto found = handed_.find(b);
    ROBOCACHE_CHECK_VALUE(found != handed_.end(), "MappedFeed.wait: batch ", b,
                          " is not handed over (each batch is waited for once)");
    Handed handed = std::move(found->second);
    handed_.erase(found);
    int64_t first_short = -1;
    std::exception_ptr error;
    for (size_t f = 0; f < handed.tickets.size(); ++f) {
      try {
        if (reader_->wait(handed.tickets[f]) >= 0 && first_short < 0) {
          first_short = static_cast<int64_t>(f);
        }
      } catch (...) {
        if (!error) {
          error = std::current_exception();
        }
      }
    }
    if (error) {
      std::rethrow_exception(error);
    }
    return {first_short, std::move(handed.sizes), std::move(handed.counts)};
  }

  // One batch of the sampler's graphs: waits for batch i's reads, copies
  // its rows into `staging`'s buffers (its slot free once they are), then
  // hands batch `ahead` over (none where ahead < 0). Returns -1, or the
  // first finder whose file ended inside its rows (nothing staged).
  int64_t advance(int64_t i, const c10::intrusive_ptr<RowStaging>& staging, int64_t ahead) {
    const auto waited = wait(i);
    if (std::get<0>(waited) >= 0) {
      return std::get<0>(waited);
    }
    ring_->stage(ring_->slot_of(i), staging, std::get<1>(waited));
    if (ahead >= 0) {
      hand(ahead);
    }
    return -1;
  }

 private:
  struct Handed {
    std::vector<int64_t> tickets, sizes, counts;
  };

  c10::intrusive_ptr<RowRing> ring_;
  c10::intrusive_ptr<RowReader> reader_;
  std::vector<int64_t> fds_, row_counts_;
  std::vector<std::vector<int64_t>> begins_, row_bytes_, starts_;
  std::vector<int64_t> rooms_, ends_, last_bytes_;
  int64_t first_ = 0, batches_ = 0;
  std::vector<at::Tensor> rows_, bounds_, offsets_, times_;
  std::unordered_map<int64_t, Handed> handed_;
};

void register_mapped_feed(torch::Library& m) {
  m.class_<MappedFeed>("MappedFeed")
      .def(
          torch::init<c10::intrusive_ptr<RowRing>, c10::intrusive_ptr<RowReader>,
                      std::vector<int64_t>, std::vector<int64_t>, std::vector<std::vector<int64_t>>,
                      std::vector<std::vector<int64_t>>, std::vector<std::vector<int64_t>>,
                      std::vector<int64_t>, std::vector<int64_t>, std::vector<int64_t>>())
      .def("chunk", &MappedFeed::chunk)
      .def("hand", &MappedFeed::hand)
      .def("wait", &MappedFeed::wait)
      .def("advance", &MappedFeed::advance);
}

}  // namespace robocache::io

#endif  // ROBOCACHE_WITH_CUDA
