// torch.classes.robocache.MappedFeed (mapped_feed.h; CUDA builds only).
#if defined(ROBOCACHE_WITH_CUDA)

#include "mapped_feed.h"

#include <torch/library.h>

#include <algorithm>
#include <string>

#include "register.h"
#include "robocache/error.h"
#include "robocache/marks.h"

namespace robocache::io {

MappedFeed::MappedFeed(c10::intrusive_ptr<RowRing> ring, c10::intrusive_ptr<RowReader> reader,
                       c10::intrusive_ptr<EpochRows> epoch, std::vector<int64_t> fds,
                       std::vector<int64_t> row_counts, std::vector<std::vector<int64_t>> begins,
                       std::vector<std::vector<int64_t>> row_bytes,
                       std::vector<std::vector<int64_t>> starts, std::vector<int64_t> rooms,
                       std::vector<int64_t> ends, std::vector<int64_t> last_bytes)
    : ring_(std::move(ring)),
      reader_(std::move(reader)),
      epoch_(std::move(epoch)),
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
  ROBOCACHE_CHECK_VALUE(epoch_->finders() == static_cast<int64_t>(count),
                        "MappedFeed: epoch finds the rows of ", epoch_->finders(),
                        " finders, the ring's slots hold ", count);
  count_ = epoch_->batches();
  marks_ = make_marks(2);
}

MappedFeed::~MappedFeed() {
  try {
    stop();
  } catch (...) {
  }
}

int64_t MappedFeed::mark(Mark which) const {
  return load_mark(marks_, which);
}

void MappedFeed::set_mark(Mark which, int64_t value) {
  store_mark(marks_, which, value);
}

void MappedFeed::drop_cut(int64_t b) {
  for (auto it = landed_.begin(); it != landed_.end();) {
    it = it->first < b ? landed_.erase(it) : std::next(it);
  }
}

bool MappedFeed::has_chunk(int64_t b) {
  std::lock_guard<std::mutex> lock(mutex_);
  return chunk_of(b) != nullptr;
}

void MappedFeed::find_chunk(int64_t b) {
  auto [first, rows, bounds, offsets, times] = epoch_->chunk(b);
  const int64_t batches = bounds[0].numel() - 1;
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = chunks_.begin(); it != chunks_.end();) {
    it = it->first + it->second.batches <= handed_upto_ ? chunks_.erase(it) : std::next(it);
  }
  chunks_[first] = Chunk{
      std::move(rows), std::move(bounds), std::move(offsets), std::move(times), first, batches};
}

const MappedFeed::Chunk* MappedFeed::chunk_of(int64_t b) const {
  auto after = chunks_.upper_bound(b);
  if (after == chunks_.begin()) {
    return nullptr;
  }
  const Chunk& chunk = std::prev(after)->second;
  return b < chunk.first + chunk.batches ? &chunk : nullptr;
}

bool MappedFeed::slot_held(int64_t b, int64_t& holder) const {
  const int64_t slot = ring_->slot_of(b);
  for (const auto& [other, _] : handed_) {
    if (ring_->slot_of(other) == slot) {
      holder = other;
      return true;
    }
  }
  for (const auto& [other, _] : landed_) {
    if (ring_->slot_of(other) == slot) {
      holder = other;
      return true;
    }
  }
  holder = collecting_;
  return collecting_ >= 0 && ring_->slot_of(collecting_) == slot;
}

void MappedFeed::hand(int64_t b) {
  struct Read {
    at::Tensor rows;
    std::vector<at::Tensor> head;
  };
  std::vector<Read> reads;
  if (!has_chunk(b)) {
    find_chunk(b);
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const Chunk* chunk = chunk_of(b);
    ROBOCACHE_CHECK_VALUE(chunk != nullptr, "MappedFeed.hand: the rows of batch ", b,
                          " were let go before it was handed over");
    int64_t holder = -1;
    ROBOCACHE_CHECK_VALUE(!slot_held(b, holder), "MappedFeed.hand: batch ", b,
                          holder == b ? " is handed over already"
                                      : " would read into the slot of a batch not yet waited "
                                        "for (batch ",
                          holder == b ? "" : std::to_string(holder) + "): the ring is too small");
    const int64_t k = b - chunk->first;
    for (size_t f = 0; f < fds_.size(); ++f) {
      const int64_t* bound = chunk->bounds[f].data_ptr<int64_t>();
      const int64_t count = bound[k + 1] - bound[k];
      ROBOCACHE_CHECK_VALUE(count <= rooms_[f], "MappedFeed.hand: batch ", b, " reads ", count,
                            " rows of finder ", f, ", its buffer holds ", rooms_[f]);
      reads.push_back(
          {chunk->rows[f].narrow(0, bound[k], count),
           {chunk->offsets[f].select(0, k), chunk->times[f].narrow(0, bound[k], count)}});
    }
  }
  const int64_t slot = ring_->slot_of(b);
  ring_->take(slot);
  const std::vector<at::Tensor>& buffers = ring_->buffers(slot);
  Handed handed;
  try {
    for (size_t f = 0; f < fds_.size(); ++f) {
      const int64_t count = reads[f].rows.numel();
      handed.tickets.push_back(reader_->submit_unwoken(fds_[f], row_counts_[f], reads[f].rows,
                                                       begins_[f], row_bytes_[f], buffers[f],
                                                       starts_[f], reads[f].head));
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
  std::lock_guard<std::mutex> lock(mutex_);
  handed_.emplace(b, std::move(handed));
  handed_upto_ = std::max(handed_upto_, b + 1);
}

MappedFeed::Landed MappedFeed::collect(int64_t b) {
  Handed handed;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = handed_.find(b);
    ROBOCACHE_CHECK_VALUE(found != handed_.end(), "MappedFeed.wait: batch ", b,
                          " is not handed over (each batch is waited for once)");
    handed = std::move(found->second);
    handed_.erase(found);
  }
  Landed landed;
  for (size_t f = 0; f < handed.tickets.size(); ++f) {
    try {
      if (reader_->wait(handed.tickets[f]) >= 0 && landed.first_short < 0) {
        landed.first_short = static_cast<int64_t>(f);
      }
    } catch (...) {
      if (!landed.error) {
        landed.error = std::current_exception();
      }
    }
  }
  landed.sizes = std::move(handed.sizes);
  landed.counts = std::move(handed.counts);
  return landed;
}

std::tuple<int64_t, std::vector<int64_t>, std::vector<int64_t>> MappedFeed::wait(int64_t b) {
  stop();
  Landed landed;
  bool found = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = landed_.find(b);
    if (it != landed_.end()) {
      landed = std::move(it->second);
      landed_.erase(it);
      found = true;
    }
  }
  if (!found) {
    landed = collect(b);
  }
  if (landed.error) {
    std::rethrow_exception(landed.error);
  }
  if (landed.copied) {
    // Its slot is freed by the caller's stream (RowRing::used): after the
    // copy the thread queued from it.
    ring_->await_copy(ring_->slot_of(b));
  }
  return {landed.first_short, std::move(landed.sizes), std::move(landed.counts)};
}

void MappedFeed::start(int64_t first, c10::intrusive_ptr<RowStaging> staging, int64_t depth) {
  ROBOCACHE_CHECK_VALUE(!thread_.joinable(), "MappedFeed.start: the feed is started already");
  ROBOCACHE_CHECK_VALUE(depth >= 1 && first >= 0 && first < count_,
                        "MappedFeed.start: depth must be >= 1 and first a batch of the epoch's ",
                        count_, "; got depth ", depth, ", first ", first);
  ROBOCACHE_CHECK_VALUE(staging->device() == ring_->device(), "MappedFeed.start: staging copies ",
                        "to GPU ", staging->device(), ", the ring's slots are for GPU ",
                        ring_->device());
  // The thread holds depth + 2 batches' slots at most: the one copied and
  // not yet taken, the one waited for, and those handed over.
  ROBOCACHE_CHECK_VALUE(ring_->slots() >= depth + 2, "MappedFeed.start: a ring of ", ring_->slots(),
                        " slots is too small to read ", depth, " batches ahead (it needs ",
                        depth + 2, ")");
  std::lock_guard<std::mutex> lock(mutex_);
  staging_ = std::move(staging);
  depth_ = depth;
  set_mark(kCut, first);
  set_mark(kStaged, first);
  stopping_ = false;
  failure_ = nullptr;
  thread_ = std::thread([this, first] { feed(first); });
  feeding_ = true;  // the thread reads it under the lock, once it is released
}

bool MappedFeed::to_hand(int64_t b) {
  std::lock_guard<std::mutex> lock(mutex_);
  return !stopping_ && handed_.count(b) == 0 && landed_.count(b) == 0;
}

void MappedFeed::feed(int64_t first) {
  try {
    for (int64_t b = first; b < count_; ++b) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        collecting_ = b;
      }
      Landed landed = collect(b);
      const bool whole = !landed.error && landed.first_short < 0;
      std::exception_ptr hand_error;
      const int64_t ahead = b + depth_;
      if (whole && ahead < count_) {
        try {
          if (to_hand(ahead)) {
            hand(ahead);
          }
        } catch (...) {
          hand_error = std::current_exception();
        }
      }
      bool go = false;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        while (!stopping_ && mark(kCut) < b) {
          changed_.wait_for(lock, kCutPoll);
        }
        go = !stopping_;
        drop_cut(std::min(b, mark(kCut)));  // taken by the graphs launched
      }
      if (go && whole) {
        try {
          ring_->copy(ring_->slot_of(b), staging_, landed.sizes);
          landed.copied = true;
        } catch (...) {
          landed.error = std::current_exception();
        }
      }
      const bool copied = landed.copied;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        landed_.emplace(b, std::move(landed));
        collecting_ = -1;
        if (hand_error) {
          failure_ = hand_error;
        }
      }
      if (copied) {
        set_mark(kStaged, b + 1);
      }
      changed_.notify_all();
      if (!copied || hand_error) {
        break;
      }
      // The next chunk's rows, found while the caller's step runs, not
      // between a batch's reads and its copy. An error is left to hand(),
      // which finds them again and fails that batch.
      if (ahead + 1 < count_ && !has_chunk(ahead + 1)) {
        try {
          find_chunk(ahead + 1);
        } catch (...) {
        }
      }
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    failure_ = std::current_exception();
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    feeding_ = false;
    collecting_ = -1;
  }
  changed_.notify_all();
}

int64_t MappedFeed::staged(int64_t i) {
  Landed landed;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (landed_.count(i) == 0) {
      changed_.notify_all();  // the feed's thread looks at the cut mark now, not at its next poll
    }
    changed_.wait(lock, [&] { return landed_.count(i) > 0 || !feeding_; });
    auto it = landed_.find(i);
    if (it == landed_.end()) {
      if (failure_) {
        std::rethrow_exception(failure_);
      }
      ROBOCACHE_CHECK_VALUE(false, "MappedFeed.staged: batch ", i,
                            " is not fed: the feed is not started or has stopped before it");
    }
    landed = std::move(it->second);
    landed_.erase(it);
  }
  if (landed.error) {
    std::rethrow_exception(landed.error);
  }
  if (landed.first_short >= 0) {
    return landed.first_short;
  }
  ROBOCACHE_CHECK_VALUE(landed.copied, "MappedFeed.staged: batch ", i,
                        " was not copied: the feed stopped before it");
  return -1;
}

std::vector<int64_t> MappedFeed::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) {
    thread_.join();
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (staging_) {
    drop_cut(mark(kCut));
  }
  std::vector<int64_t> held;
  for (const auto& [b, _] : handed_) {
    held.push_back(b);
  }
  for (const auto& [b, _] : landed_) {
    held.push_back(b);
  }
  std::sort(held.begin(), held.end());
  return held;
}

void register_mapped_feed(torch::Library& m) {
  m.class_<MappedFeed>("MappedFeed")
      .def(torch::init<c10::intrusive_ptr<RowRing>, c10::intrusive_ptr<RowReader>,
                       c10::intrusive_ptr<EpochRows>, std::vector<int64_t>, std::vector<int64_t>,
                       std::vector<std::vector<int64_t>>, std::vector<std::vector<int64_t>>,
                       std::vector<std::vector<int64_t>>, std::vector<int64_t>,
                       std::vector<int64_t>, std::vector<int64_t>>())
      .def("hand", &MappedFeed::hand)
      .def("wait", &MappedFeed::wait)
      .def("start", &MappedFeed::start)
      .def("staged", &MappedFeed::staged)
      .def("marks", &MappedFeed::marks)
      .def("stop", &MappedFeed::stop);
}

}  // namespace robocache::io

#endif  // ROBOCACHE_WITH_CUDA
