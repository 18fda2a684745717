#include "row_reader.h"

#include "extents.h"
#include "read_pieces.h"

#include <robocache/error.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <limits>
#include <string>

namespace robocache::io {

// One read handed over: its pieces, handed out one at a time to whichever
// thread asks.
struct RowReader::Job {
  int fd = -1;
  at::Tensor rows, out;  // held until the read is waited for
  const int64_t* row_numbers = nullptr;
  uint8_t* target = nullptr;
  std::vector<Piece> pieces;
  std::vector<Extent> extents;  // a check's, each one part of the job
  std::atomic<int64_t> next{0};
  std::atomic<bool> hinted{false};
  std::atomic<int64_t> finished{0};
  std::atomic<int64_t> first_short{std::numeric_limits<int64_t>::max()};
  std::mutex mutex;
  std::condition_variable done;
  std::string error;  // the first OS error, if any

  int64_t count() const { return static_cast<int64_t>(pieces.size() + extents.size()); }

  // A part that ended with `code` (0, 1: the file ends inside it or a check
  // differs, else errno): `at` (the first row of a piece, an extent's
  // number) kept where it is the first such, an error of the OS kept; the
  // part counted as finished.
  void record(int code, int64_t at) {
    if (code == 1) {
      int64_t seen = first_short.load();
      while (at < seen && !first_short.compare_exchange_weak(seen, at)) {
      }
    } else if (code != 0) {
      std::lock_guard<std::mutex> lock(mutex);
      if (error.empty()) {
        error = std::strerror(code);
      }
    }
    finish_part();
  }

  void finish_part() {
    if (finished.fetch_add(1) + 1 == count()) {
      std::lock_guard<std::mutex> lock(mutex);
      done.notify_all();
    }
  }
};

RowReader::RowReader(int64_t threads) {
  ROBOCACHE_CHECK_VALUE(threads >= 0 && threads <= 256,
                        "RowReader: threads must be in 0..256; got ", threads);
  workers_.reserve(static_cast<size_t>(threads));
  for (int64_t i = 0; i < threads; ++i) {
    workers_.emplace_back([this] { work(); });
  }
}

RowReader::~RowReader() {
  close();
}

void RowReader::close() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) {
      return;
    }
    stopping_ = true;
    closing_.store(true);
  }
  wake_.notify_all();
  for (auto& worker : workers_) {
    if (worker.joinable()) {
      worker.join();
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  queue_.clear();
  jobs_.clear();
}

int64_t RowReader::pending() {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(jobs_.size());
}

void RowReader::run_part(Job& job, const std::atomic<bool>* stop) {
  if (stop == nullptr && !job.pieces.empty() && !job.hinted.exchange(true)) {
    // A read that its waiter starts (a reader of no threads of its own, or
    // threads busy with earlier reads) is read a piece at a time: the
    // kernel is told every piece first, so that the disk gets them all at
    // once (pieces already in the page cache cost a look-up).
    for (const Piece& piece : job.pieces) {
      (void)posix_fadvise(job.fd, piece.file_offset, piece.bytes, POSIX_FADV_WILLNEED);
    }
  }
  std::vector<uint8_t> scratch;
  for (;;) {
    if (stop != nullptr && stop->load()) {
      return;
    }
    const int64_t i = job.next.fetch_add(1);
    if (i >= job.count()) {
      return;
    }
    if (i >= static_cast<int64_t>(job.pieces.size())) {
      const int64_t k = i - static_cast<int64_t>(job.pieces.size());
      const int code = check_extent(job.fd, job.extents[static_cast<size_t>(k)], scratch);
      job.record(code, k);
      continue;
    }
    const Piece& piece = job.pieces[static_cast<size_t>(i)];
    uint8_t* target = job.target + piece.out_offset;
    if (piece.gapped) {
      scratch.resize(static_cast<size_t>(piece.bytes));
      target = scratch.data();
    }
    const int code = read_fully(job.fd, target, piece.bytes, piece.file_offset);
    if (code != 0) {
      job.record(code, piece.first);
      continue;
    }
    if (piece.gapped) {
      const int64_t first_row = job.row_numbers[piece.first];
      const int64_t size = piece.row_bytes;
      for (int64_t k = piece.first; k < piece.end; ++k) {
        std::memcpy(job.target + piece.base + k * size,
                    scratch.data() + (job.row_numbers[k] - first_row) * size,
                    static_cast<size_t>(size));
      }
    }
    job.finish_part();
  }
}

void RowReader::work() {
  for (;;) {
    std::shared_ptr<Job> job;
    bool more;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) {
        return;
      }
      job = queue_.front();
      if (job->next.load() >= job->count()) {  // every piece handed out
        queue_.pop_front();
        continue;
      }
      more = job->count() - job->next.load() > 1 || queue_.size() > 1;
    }
    // Threads wake one another while pieces are left: the thread that
    // hands reads over wakes one (wake()), each thread that takes a piece
    // with more left wakes the next.
    if (more) {
      wake_.notify_one();
    }
    run_part(*job, &closing_);
  }
}

int64_t RowReader::submit(int64_t fd, int64_t row_count, const at::Tensor& rows,
                          const std::vector<int64_t>& begins, const std::vector<int64_t>& row_bytes,
                          const at::Tensor& out, const std::vector<int64_t>& at,
                          const std::vector<at::Tensor>& head) {
  const int64_t ticket = submit_unwoken(fd, row_count, rows, begins, row_bytes, out, at, head);
  wake();
  return ticket;
}

int64_t RowReader::submit_unwoken(int64_t fd, int64_t row_count, const at::Tensor& rows,
                                  const std::vector<int64_t>& begins,
                                  const std::vector<int64_t>& row_bytes, const at::Tensor& out,
                                  const std::vector<int64_t>& at,
                                  const std::vector<at::Tensor>& head) {
  ROBOCACHE_CHECK_VALUE(fd >= 0, "RowReader.submit: fd must be an open file; got ", fd);
  ROBOCACHE_CHECK_VALUE(row_count >= 0, "RowReader.submit: row_count must be >= 0; got ",
                        row_count);
  ROBOCACHE_CHECK_VALUE(rows.device().is_cpu() && rows.scalar_type() == at::kLong &&
                            rows.dim() == 1 && rows.is_contiguous(),
                        "RowReader.submit: rows must be a contiguous 1-D int64 CPU tensor");
  ROBOCACHE_CHECK_VALUE(
      out.device().is_cpu() && out.scalar_type() == at::kByte && out.is_contiguous(),
      "RowReader.submit: out must be a contiguous uint8 host tensor");
  ROBOCACHE_CHECK_VALUE(begins.size() == row_bytes.size() && begins.size() == at.size(),
                        "RowReader.submit: begins, row_bytes and at must be as long; got ",
                        begins.size(), ", ", row_bytes.size(), " and ", at.size());
  const int64_t count = rows.numel();
  const int64_t capacity = out.numel();
  const int64_t largest = std::numeric_limits<int64_t>::max();
  for (size_t k = 0; k < begins.size(); ++k) {
    const int64_t size = row_bytes[k];
    ROBOCACHE_CHECK_VALUE(begins[k] >= 0 && size > 0, "RowReader.submit: stream ", k,
                          ": begin and row_bytes must be >= 0 and > 0; got ", begins[k], " and ",
                          size);
    ROBOCACHE_CHECK_VALUE(row_count <= (largest - begins[k]) / size, "RowReader.submit: stream ", k,
                          ": ", row_count, " rows of ", size, " bytes from byte ", begins[k],
                          " pass the largest file offset");
    ROBOCACHE_CHECK_VALUE(at[k] >= 0 && at[k] <= capacity && count <= (capacity - at[k]) / size,
                          "RowReader.submit: stream ", k, ": ", count, " rows of ", size,
                          " bytes from byte ", at[k], " do not fit out's ", capacity, " bytes");
  }
  int64_t head_bytes = 0;
  for (size_t k = 0; k < head.size(); ++k) {
    ROBOCACHE_CHECK_VALUE(head[k].device().is_cpu() && head[k].is_contiguous(),
                          "RowReader.submit: head[", k, "] must be a contiguous host tensor");
    head_bytes += head[k].nbytes();
  }
  ROBOCACHE_CHECK_VALUE(head_bytes <= capacity, "RowReader.submit: head's ", head_bytes,
                        " bytes do not fit out's ", capacity, " bytes");
  for (size_t k = 0; count > 0 && k < at.size(); ++k) {
    ROBOCACHE_CHECK_VALUE(head_bytes <= at[k], "RowReader.submit: head's ", head_bytes,
                          " bytes pass the start of stream ", k, "'s rows (byte ", at[k], ")");
  }
  const int64_t* r = rows.data_ptr<int64_t>();
  for (int64_t i = 0; i < count; ++i) {
    ROBOCACHE_CHECK_VALUE(r[i] >= 0 && r[i] < row_count && (i == 0 || r[i] > r[i - 1]),
                          "RowReader.submit: rows must increase, each in 0..", row_count, "; got ",
                          r[i], " at ", i, i > 0 ? " after " : "",
                          i > 0 ? std::to_string(r[i - 1]) : std::string());
  }
  auto* into = static_cast<uint8_t*>(out.data_ptr());
  for (const at::Tensor& part : head) {
    if (part.nbytes() > 0) {
      std::memcpy(into, part.data_ptr(), part.nbytes());
      into += part.nbytes();
    }
  }
  auto job = std::make_shared<Job>();
  job->fd = static_cast<int>(fd);
  job->rows = rows;
  job->out = out;
  job->row_numbers = r;
  job->target = static_cast<uint8_t*>(out.data_ptr());
  for (size_t k = 0; k < begins.size(); ++k) {
    add_pieces(job->pieces, r, count, begins[k], row_bytes[k], at[k]);
  }
  return enqueue(std::move(job), "RowReader.submit");
}

int64_t RowReader::submit_checks(int64_t fd, const std::vector<int64_t>& begins,
                                 const std::vector<int64_t>& lengths,
                                 const std::vector<int64_t>& crcs) {
  ROBOCACHE_CHECK_VALUE(fd >= 0, "RowReader.submit_checks: fd must be an open file; got ", fd);
  ROBOCACHE_CHECK_VALUE(begins.size() == lengths.size() && begins.size() == crcs.size(),
                        "RowReader.submit_checks: begins, lengths and crcs must be as long; got ",
                        begins.size(), ", ", lengths.size(), " and ", crcs.size());
  auto job = std::make_shared<Job>();
  job->fd = static_cast<int>(fd);
  job->extents.reserve(begins.size());
  for (size_t k = 0; k < begins.size(); ++k) {
    ROBOCACHE_CHECK_VALUE(begins[k] >= 0 && lengths[k] >= 0 &&
                              lengths[k] <= std::numeric_limits<int64_t>::max() - begins[k],
                          "RowReader.submit_checks: extent ", k,
                          ": begin and length must be >= 0 and end within "
                          "the largest file offset; got ",
                          begins[k], " and ", lengths[k]);
    ROBOCACHE_CHECK_VALUE(crcs[k] >= 0 && crcs[k] <= 0xFFFFFFFFll, "RowReader.submit_checks: crcs[",
                          k, "] must be a CRC-32 (0..2**32 - 1); got ", crcs[k]);
    job->extents.push_back({begins[k], lengths[k], static_cast<uint32_t>(crcs[k])});
  }
  const int64_t ticket = enqueue(std::move(job), "RowReader.submit_checks");
  wake();
  return ticket;
}

int64_t RowReader::enqueue(std::shared_ptr<Job> job, const char* where) {
  int64_t ticket;
  const bool work = job->count() > 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ROBOCACHE_CHECK(!stopping_, where, ": the reader was closed");
    ticket = next_ticket_++;
    if (work && !workers_.empty()) {
      queue_.push_back(job);
    }
    jobs_.emplace(ticket, std::move(job));
  }
  return ticket;
}

int64_t RowReader::wait(int64_t ticket) {
  std::shared_ptr<Job> job;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ROBOCACHE_CHECK(!stopping_, "RowReader.wait: the reader was closed");
    auto found = jobs_.find(ticket);
    ROBOCACHE_CHECK_VALUE(found != jobs_.end(), "RowReader.wait: no read ", ticket,
                          " is waiting (each read is waited for once)");
    job = found->second;
    jobs_.erase(found);
  }
  run_part(*job);  // whoever waits reads too
  {
    std::unique_lock<std::mutex> lock(job->mutex);
    job->done.wait(lock, [&] { return job->finished.load() == job->count(); });
  }
  // The tensors are let go here, on the waiting thread: a tensor that Python
  // also held frees its Python object when its last holder lets go, which
  // needs the GIL. A reader's thread may hold the job a moment longer, and
  // must never be the one to free them (a thread closing the reader with the
  // GIL held would wait for it forever).
  job->rows = at::Tensor();
  job->out = at::Tensor();
  ROBOCACHE_CHECK(job->error.empty(), "RowReader: reading the file failed: ", job->error);
  const int64_t first = job->first_short.load();
  return first == std::numeric_limits<int64_t>::max() ? -1 : first;
}

int64_t RowReader::read(int64_t fd, int64_t row_count, const at::Tensor& rows,
                        const std::vector<int64_t>& begins, const std::vector<int64_t>& row_bytes,
                        const at::Tensor& out, const std::vector<int64_t>& at) {
  return wait(submit(fd, row_count, rows, begins, row_bytes, out, at, {}));
}

int64_t RowReader::read_extents(int64_t fd, const at::Tensor& begins, const at::Tensor& lengths,
                                const at::Tensor& out, const at::Tensor& at) {
  ROBOCACHE_CHECK_VALUE(fd >= 0, "RowReader.read_extents: fd must be an open file; got ", fd);
  for (const at::Tensor* t : {&begins, &lengths, &at}) {
    ROBOCACHE_CHECK_VALUE(t->device().is_cpu() && t->scalar_type() == at::kLong && t->dim() == 1 &&
                              t->is_contiguous() && t->numel() == begins.numel(),
                          "RowReader.read_extents: begins, lengths and at must be contiguous "
                          "(n,) int64 CPU tensors of one length");
  }
  ROBOCACHE_CHECK_VALUE(
      out.device().is_cpu() && out.scalar_type() == at::kByte && out.is_contiguous(),
      "RowReader.read_extents: out must be a contiguous uint8 host tensor");
  const int64_t n = begins.numel();
  const int64_t *begin = begins.data_ptr<int64_t>(), *length = lengths.data_ptr<int64_t>(),
                *place = at.data_ptr<int64_t>();
  for (int64_t k = 0; k < n; ++k) {
    ROBOCACHE_CHECK_VALUE(
        begin[k] >= 0 && length[k] >= 0 && place[k] >= 0 && place[k] <= out.numel() - length[k],
        "RowReader.read_extents: extent ", k, " (", length[k], " bytes at ", begin[k], " into ",
        place[k], ") does not fit out's ", out.numel(), " bytes");
  }
  return io::read_extents(static_cast<int>(fd), begin, length, place, n, out.data_ptr<uint8_t>());
}

}  // namespace robocache::io
