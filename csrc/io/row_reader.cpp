#include "row_reader.h"

#include <robocache/error.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

namespace robocache::io {

// One read(): its runs, handed out one at a time to whichever thread asks.
struct RowReader::Job {
  int fd = -1;
  const int64_t* runs = nullptr;  // (R, 3)
  int64_t count = 0;
  uint8_t* out = nullptr;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> finished{0};
  std::atomic<int64_t> first_short{std::numeric_limits<int64_t>::max()};
  std::mutex mutex;
  std::condition_variable done;
  std::string error;  // the first OS error, if any
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
  }
  wake_.notify_all();
  for (auto& worker : workers_) {
    if (worker.joinable()) {
      worker.join();
    }
  }
}

void RowReader::run_part(Job& job) {
  for (;;) {
    const int64_t i = job.next.fetch_add(1);
    if (i >= job.count) {
      return;
    }
    const int64_t* run = job.runs + 3 * i;
    int64_t offset = run[0], left = run[1];
    uint8_t* target = job.out + run[2];
    while (left > 0) {
      const size_t ask = static_cast<size_t>(std::min<int64_t>(left, int64_t{1} << 30));
      const ssize_t got = ::pread(job.fd, target, ask, static_cast<off_t>(offset));
      if (got > 0) {
        offset += got;
        target += got;
        left -= got;
        continue;
      }
      if (got < 0 && errno == EINTR) {
        continue;
      }
      if (got == 0) {  // the file ends inside this run
        int64_t seen = job.first_short.load();
        while (i < seen && !job.first_short.compare_exchange_weak(seen, i)) {
        }
      } else {
        const int code = errno;
        std::lock_guard<std::mutex> lock(job.mutex);
        if (job.error.empty()) {
          job.error = std::strerror(code);
        }
      }
      break;
    }
    if (job.finished.fetch_add(1) + 1 == job.count) {
      std::lock_guard<std::mutex> lock(job.mutex);
      job.done.notify_all();
    }
  }
}

void RowReader::work() {
  uint64_t seen = 0;
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) {
        return;
      }
      seen = generation_;
      job = job_;
    }
    if (job) {
      run_part(*job);
    }
  }
}

int64_t RowReader::read(int64_t fd, const at::Tensor& runs, const at::Tensor& out) {
  ROBOCACHE_CHECK_VALUE(fd >= 0, "RowReader.read: fd must be an open file; got ", fd);
  ROBOCACHE_CHECK_VALUE(runs.device().is_cpu() && runs.scalar_type() == at::kLong &&
                            runs.dim() == 2 && runs.size(1) == 3 && runs.is_contiguous(),
                        "RowReader.read: runs must be a contiguous (R, 3) int64 CPU tensor");
  ROBOCACHE_CHECK_VALUE(
      out.device().is_cpu() && out.scalar_type() == at::kByte && out.is_contiguous(),
      "RowReader.read: out must be a contiguous uint8 host tensor");
  const int64_t count = runs.size(0);
  const int64_t* r = runs.data_ptr<int64_t>();
  const int64_t capacity = out.numel();
  for (int64_t i = 0; i < count; ++i) {
    const int64_t offset = r[3 * i], size = r[3 * i + 1], at = r[3 * i + 2];
    ROBOCACHE_CHECK_VALUE(
        offset >= 0 && size >= 0 && at >= 0 && at <= capacity && size <= capacity - at,
        "RowReader.read: run ", i, " (file offset ", offset, ", ", size, " bytes, at ", at,
        ") does not fit out's ", capacity, " bytes");
  }
  if (count == 0) {
    return -1;
  }
  auto job = std::make_shared<Job>();
  job->fd = static_cast<int>(fd);
  job->runs = r;
  job->count = count;
  job->out = static_cast<uint8_t*>(out.data_ptr());
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ROBOCACHE_CHECK(!stopping_, "RowReader.read: the reader was closed");
    job_ = job;
    ++generation_;
  }
  if (count > 1) {
    wake_.notify_all();
  }
  run_part(*job);  // the caller reads too
  {
    std::unique_lock<std::mutex> lock(job->mutex);
    job->done.wait(lock, [&] { return job->finished.load() == count; });
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (job_ == job) {
      job_.reset();
    }
  }
  ROBOCACHE_CHECK(job->error.empty(), "RowReader.read: reading the file failed: ", job->error);
  const int64_t first = job->first_short.load();
  return first == std::numeric_limits<int64_t>::max() ? -1 : first;
}

}  // namespace robocache::io
