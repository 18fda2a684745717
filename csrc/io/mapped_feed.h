// An iteration's mapped rows fed to the sampler's CUDA graphs by a thread of
// the feed's own: torch.classes.robocache.MappedFeed (CUDA builds only).
// The rows each batch reads are found a chunk of batches at a time on the
// host (EpochRows), where a batch is handed over. Once started, the feed's
// thread waits for each batch's reads in turn, hands the read of a later
// batch to the row reader (into a ring slot, RowRing, that the GPU is done
// copying from), and copies the batch's rows into the graphs' buffers
// (RowStaging) once the cut of the batch before it is queued; then it finds
// the rows of the next chunk where they are not found yet. The graphs wait
// for each copy and mark each cut on the GPU: the caller's thread makes no
// CUDA call for them, and no call at all where a batch is copied in time: it
// reads and writes two marks (marks()) that the feed shares with it.
#pragma once

#if defined(ROBOCACHE_WITH_CUDA)

#include <ATen/core/Tensor.h>
#include <torch/custom_class.h>

#include <chrono>
#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "row_reader.h"
#include "row_staging.h"
#include "window_rows.h"

namespace robocache::io {

class MappedFeed : public torch::CustomClassHolder {
 public:
  // How often the feed's thread looks at the caller's cut mark while it
  // waits for it.
  static constexpr std::chrono::microseconds kCutPoll{50};

  // For each finder f (the keys sharing one timeline and rule): its rows in
  // the file fds[f] of row_counts[f] rows, key k's row r at byte
  // begins[f][k] + r * row_bytes[f][k], landing in the ring slot's buffer f
  // at starts[f][k] (laid out for rooms[f] rows, the batch's index first);
  // ends[f] is where its last key's rows begin and last_bytes[f] a row of
  // it, so a batch of n rows fills ends[f] + n * last_bytes[f] bytes.
  // `epoch` finds the rows of the iteration's batches (one window a finder).
  MappedFeed(c10::intrusive_ptr<RowRing> ring, c10::intrusive_ptr<RowReader> reader,
             c10::intrusive_ptr<EpochRows> epoch, std::vector<int64_t> fds,
             std::vector<int64_t> row_counts, std::vector<std::vector<int64_t>> begins,
             std::vector<std::vector<int64_t>> row_bytes, std::vector<std::vector<int64_t>> starts,
             std::vector<int64_t> rooms, std::vector<int64_t> ends,
             std::vector<int64_t> last_bytes);
  // Stops the feed's thread.
  ~MappedFeed() override;
  MappedFeed(const MappedFeed&) = delete;
  MappedFeed& operator=(const MappedFeed&) = delete;

  // Hands the read of batch b over (its chunk's rows found where they are
  // not yet), into its ring slot, once the GPU is done copying from that
  // slot.
  void hand(int64_t b);

  // Waits for batch b's reads (every one, then the first error raised):
  // (the first finder whose file ended inside its rows, or -1; the bytes
  // each finder's buffer holds; the rows each finder read). The feed's
  // thread is stopped first.
  std::tuple<int64_t, std::vector<int64_t>, std::vector<int64_t>> wait(int64_t b);

  // Starts the feed's thread at batch `first`, read `depth` batches ahead
  // (batches first..first + depth - 1 handed over already). For each batch
  // b in turn it waits for b's reads, hands batch b + depth over, and once
  // the caller's cut mark is past batch b - 1 (marks()) copies b's rows
  // into `staging`'s buffers.
  void start(int64_t first, c10::intrusive_ptr<RowStaging> staging, int64_t depth);

  // Returns once the feed's thread has queued the copy of batch i's rows:
  // -1, or the first finder whose file ended inside its rows (nothing
  // copied); raises an error of the reads or of the thread. The graph that
  // cuts batch i waits for the copy on the GPU (RowStaging::await_copy,
  // captured in it). Where marks()[0] > i already, the copy is queued and
  // the caller need not call this.
  int64_t staged(int64_t i);

  // Two int64 marks the caller's thread reads and writes without a call:
  // [0], 1 + the last batch whose copy is queued (set by the feed's thread
  // once it is); [1], 1 + the last batch whose graph is launched (set by the
  // caller once it is: the graph marks its cut on the GPU, RowStaging::cut
  // captured in it, and the next batch's copy may follow it). The feed's
  // thread looks at [1] every kCutPoll while it waits for it, and at once
  // when staged() waits. start() sets both to its first batch.
  at::Tensor marks() const { return marks_; }

  // Stops the feed's thread (once it is at a batch's end); returns the
  // batches handed over and not yet waited for, which wait() serves.
  std::vector<int64_t> stop();

 private:
  struct Handed {
    std::vector<int64_t> tickets, sizes, counts;
  };
  struct Chunk {
    std::vector<at::Tensor> rows, bounds, offsets, times;
    int64_t first = 0, batches = 0;
  };
  // A batch whose reads are waited for.
  struct Landed {
    int64_t first_short = -1;
    std::vector<int64_t> sizes, counts;
    std::exception_ptr error;
    bool copied = false;
  };

  // The chunk batch b is in, or nullptr (mutex_ held).
  const Chunk* chunk_of(int64_t b) const;
  // Whether the rows of batch b's chunk are found (mutex_ not held).
  bool has_chunk(int64_t b);
  // Finds the rows of the chunk batch b is in (mutex_ not held) and keeps
  // them; chunks whose batches are all handed over are let go.
  void find_chunk(int64_t b);
  // Whether batch b's slot is read into or read from by a batch not yet
  // waited for (mutex_ held); `holder` is set to that batch.
  bool slot_held(int64_t b, int64_t& holder) const;
  // Waits for batch b's reads (handed over, and let go of here).
  Landed collect(int64_t b);
  // The feed's thread, from batch `first`.
  void feed(int64_t first);
  // Whether the thread is to hand batch b over: not yet handed, and the
  // feed goes on.
  bool to_hand(int64_t b);
  // A mark of marks(): kStaged, 1 + the last batch whose copy is queued;
  // kCut, 1 + the last batch whose graph is launched.
  enum Mark { kStaged = 0, kCut = 1 };
  int64_t mark(Mark which) const;
  void set_mark(Mark which, int64_t value);
  // Lets go of the batches before b that the caller has cut (mutex_ held).
  void drop_cut(int64_t b);

  c10::intrusive_ptr<RowRing> ring_;
  c10::intrusive_ptr<RowReader> reader_;
  c10::intrusive_ptr<EpochRows> epoch_;
  std::vector<int64_t> fds_, row_counts_;
  std::vector<std::vector<int64_t>> begins_, row_bytes_, starts_;
  std::vector<int64_t> rooms_, ends_, last_bytes_;

  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<int64_t, Chunk> chunks_;             // by first batch
  std::unordered_map<int64_t, Handed> handed_;  // reads not yet waited for
  std::unordered_map<int64_t, Landed> landed_;  // waited for by the thread, not yet taken
  int64_t handed_upto_ = 0;                     // 1 + the last batch handed over
  int64_t collecting_ = -1;                     // the batch the thread waits for or copies
  // The thread's state.
  std::thread thread_;
  c10::intrusive_ptr<RowStaging> staging_;
  int64_t depth_ = 0, count_ = 0;
  at::Tensor marks_;  // see marks()
  bool feeding_ = false, stopping_ = false;
  std::exception_ptr failure_;  // what ended the thread early
};

}  // namespace robocache::io

#endif  // ROBOCACHE_WITH_CUDA
