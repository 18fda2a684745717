// Runs of a file's bytes read into a host tensor by a few threads of the
// reader's own, with positional reads (pread): one call from the caller a
// batch, with no Python and no GIL on the threads.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/custom_class.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace robocache::io {

class RowReader : public torch::CustomClassHolder {
 public:
  // threads: the reader's own threads; the caller reads beside them.
  explicit RowReader(int64_t threads);
  ~RowReader() override;

  // Reads each run of `runs` ((R, 3) int64, CPU: the file offset, the byte
  // count, and the offset in `out`) from the open file `fd` into `out` (a
  // contiguous uint8 host tensor; pinned memory too). Returns -1 once every
  // run is read whole, else the first run the file ends inside (it was cut
  // after it was opened). An error of the OS is raised, naming it.
  int64_t read(int64_t fd, const at::Tensor& runs, const at::Tensor& out);

  // Ends the threads (also on destruction); read() after it is an error.
  void close();

  int64_t threads() const { return static_cast<int64_t>(workers_.size()); }

 private:
  struct Job;
  void work();
  static void run_part(Job& job);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::shared_ptr<Job> job_;  // the read in progress, if any
  uint64_t generation_ = 0;   // reads begun
  bool stopping_ = false;
};

}  // namespace robocache::io
