// Rows of a file read into host tensors (and extents of it checked against
// their CRC-32) by a few threads of the reader's own, with positional reads (pread): a batch's rows
// handed over in one call, read while the caller goes on, and waited for in another, with no Python
// and no GIL on the threads.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/custom_class.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

namespace robocache::io {

class RowReader : public torch::CustomClassHolder {
 public:
  // threads: the reader's own threads; whoever waits for a read reads too.
  explicit RowReader(int64_t threads);
  ~RowReader() override;

  // Hands over the read of rows `rows` ((R,) int64, CPU, strictly
  // increasing, each in 0..row_count) of one or more streams of a file
  // `fd`: stream k's row r lies at byte `begins[k] + r * row_bytes[k]` and
  // lands in `out` (a contiguous uint8 host tensor; pinned memory too) at
  // byte `at[k] + i * row_bytes[k]` for rows[i]. The bytes of `head`
  // (contiguous host tensors, a packed stream's index) are copied now, one
  // tensor after another, to the start of `out`, before every stream's
  // rows. Returns a ticket for wait(); both tensors are held until then.
  int64_t submit(int64_t fd, int64_t row_count, const at::Tensor& rows,
                 const std::vector<int64_t>& begins, const std::vector<int64_t>& row_bytes,
                 const at::Tensor& out, const std::vector<int64_t>& at,
                 const std::vector<at::Tensor>& head);

  // submit(), waking none of the reader's threads: whoever hands several
  // reads over at once wakes them once, with wake(), after the last.
  int64_t submit_unwoken(int64_t fd, int64_t row_count, const at::Tensor& rows,
                         const std::vector<int64_t>& begins, const std::vector<int64_t>& row_bytes,
                         const at::Tensor& out, const std::vector<int64_t>& at,
                         const std::vector<at::Tensor>& head);

  // Wakes a thread of the reader's (which wakes the next while reads wait).
  void wake() { wake_.notify_one(); }

  // Waits for the read of `ticket` (reading its rows left on this thread
  // too). Returns -1 once every row is read whole, else the position in
  // `rows` of the first row of the first run of rows read together that
  // the file ends inside (it was cut after it was opened); for a check, -1
  // or the first extent that differs. An error of the OS is raised, naming
  // it.
  int64_t wait(int64_t ticket);

  // Hands over the check of extents of a file `fd`: extent k, `lengths[k]`
  // bytes from byte `begins[k]`, must have the CRC-32 `crcs[k]` (as
  // zlib.crc32). Each extent is read and checked whole by one thread,
  // extents by several at once. Returns a ticket for wait(), which then
  // returns -1 where every extent matches, else the first k that does not
  // (or that the file ends inside).
  int64_t submit_checks(int64_t fd, const std::vector<int64_t>& begins,
                        const std::vector<int64_t>& lengths, const std::vector<int64_t>& crcs);

  // Reads byte extents of a file `fd` on the calling thread: extent k,
  // `lengths[k]` bytes from byte `begins[k]`, lands in `out` (a contiguous
  // uint8 host tensor) at byte `at[k]` (each an (n,) int64 CPU tensor).
  // Extents that follow one another in the file and in `out` are read in
  // one call. Returns -1 once all are read whole, else the first k that the
  // file ends inside.
  int64_t read_extents(int64_t fd, const at::Tensor& begins, const at::Tensor& lengths,
                       const at::Tensor& out, const at::Tensor& at);

  // submit() and wait() in one call.
  int64_t read(int64_t fd, int64_t row_count, const at::Tensor& rows,
               const std::vector<int64_t>& begins, const std::vector<int64_t>& row_bytes,
               const at::Tensor& out, const std::vector<int64_t>& at);

  // Ends the threads and drops the reads not waited for (also on
  // destruction); submit() or wait() after it is an error.
  void close();

  int64_t threads() const { return static_cast<int64_t>(workers_.size()); }

  // Reads handed over and not yet waited for.
  int64_t pending();

 private:
  struct Job;
  void work();
  // Reads the job's pieces not yet taken; with `stop` set (a reader's own
  // threads), returns before each one once it is (the waiter reads the rest).
  static void run_part(Job& job, const std::atomic<bool>* stop = nullptr);
  // Queues a job (waking no thread) and returns its ticket.
  int64_t enqueue(std::shared_ptr<Job> job, const char* where);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Job>> queue_;                  // reads with pieces left to hand out
  std::unordered_map<int64_t, std::shared_ptr<Job>> jobs_;  // reads not yet waited for
  int64_t next_ticket_ = 0;
  bool stopping_ = false;
  std::atomic<bool> closing_{false};  // stopping_, read by the threads between pieces
};

}  // namespace robocache::io
