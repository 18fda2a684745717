#include "frame_queue.h"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include <robocache/error.h>
#include <robocache/marks.h>

namespace robocache::decoders {
namespace {

c10::DeviceIndex index_of(const FrameDecoder& decoder) {
  return static_cast<c10::DeviceIndex>(decoder.device());
}

}  // namespace

FrameQueue::FrameQueue(c10::intrusive_ptr<FrameDecoder> decoder, std::vector<at::Tensor> values,
                       std::vector<at::Tensor> byte_offsets, std::vector<int64_t> files,
                       std::vector<int64_t> file_begins, std::vector<at::Tensor> rows,
                       std::vector<at::Tensor> tables, std::vector<at::Tensor> positions,
                       int64_t ahead, int64_t workers)
    : values_(std::move(values)),
      byte_offsets_(std::move(byte_offsets)),
      tables_(std::move(tables)),
      positions_(std::move(positions)),
      files_(std::move(files)),
      file_begins_(std::move(file_begins)) {
  const size_t keys = values_.size();
  ROBOCACHE_CHECK_VALUE(keys >= 1 && byte_offsets_.size() == keys && rows.size() == keys &&
                            tables_.size() == keys && positions_.size() == keys,
                        kWhere,
                        ": values, byte_offsets, rows, tables and positions need one "
                        "tensor per key, at least one key");
  ROBOCACHE_CHECK_VALUE(files_.size() == keys && file_begins_.size() == keys, kWhere,
                        ": files and file_begins need one value per key");
  for (size_t k = 0; k < keys; ++k) {
    ROBOCACHE_CHECK_VALUE(files_[k] >= -1 && (files_[k] < 0 || file_begins_[k] >= 0), kWhere,
                          ": files[", k, "] must be -1 or a file descriptor, file_begins[", k,
                          "] >= 0");
  }
  const auto device = at::Device(at::kCUDA, index_of(*decoder));
  const int64_t steps = rows[0].dim() == 2 ? rows[0].size(0) : -1;
  slots_ = tables_[0].dim() == 5 ? tables_[0].size(0) : -1;
  ROBOCACHE_CHECK_VALUE(slots_ >= 1, kWhere,
                        ": tables must be (slots, M + 1, H, W, C), slots >= 1");
  ROBOCACHE_CHECK_VALUE(ahead >= 1 && ahead <= slots_, kWhere, ": ahead must be in [1, ", slots_,
                        "] (the slots); got ", ahead);
  ROBOCACHE_CHECK_VALUE(workers >= 1 && workers <= ahead, kWhere, ": workers must be in [1, ",
                        ahead, "] (ahead); got ", workers);
  ahead_ = ahead;
  file_reads_.resize(static_cast<size_t>(workers));
  for (int64_t w = 0; w < workers; ++w) {
    decoders_.push_back(decoder->sibling(w));
    // With the engines, high priority: their few kernels run between a busy
    // step's. Without, the step's priority: the CUDA decoder's kernels,
    // decoding steps ahead, take the SMs the step leaves.
    work_streams_.push_back(c10::cuda::getStreamFromPool(decoder->uses_hardware(), device.index()));
  }
  for (size_t k = 0; k < keys; ++k) {
    check_encoded(values_[k], byte_offsets_[k], kWhere);
    widths_.push_back(rows[k].dim() == 2 ? rows[k].size(1) : -1);
  }
  check_rows(rows);
  for (size_t k = 0; k < keys; ++k) {
    const int64_t M = widths_[k];
    const auto& t = tables_[k];
    ROBOCACHE_CHECK_VALUE(t.device() == device && t.scalar_type() == at::kByte && t.dim() == 5 &&
                              t.is_contiguous() && t.size(0) == slots_ && t.size(1) >= 1 &&
                              t.size(1) <= M + 1 && (t.size(4) == 1 || t.size(4) == 3),
                          kWhere, ": tables[", k,
                          "] must be a contiguous (slots, 1 + F, H, W, C) "
                          "uint8 tensor on ",
                          device.str(),
                          ", F <= M the frames a step decodes, "
                          "C of 1 or 3");
    const auto& p = positions_[k];
    ROBOCACHE_CHECK_VALUE(p.device() == device && p.scalar_type() == at::kLong && p.dim() == 2 &&
                              p.is_contiguous() && p.size(0) == slots_ && p.size(1) == M,
                          kWhere, ": positions[", k,
                          "] must be a contiguous (slots, M) int64 "
                          "tensor on ",
                          device.str());
    staged_.push_back(
        at::empty({slots_, M}, at::TensorOptions().dtype(at::kLong).pinned_memory(true)));
  }
  c10::cuda::CUDAGuard guard(device);
  // The tables may be memory the caller's stream used last: the work stream
  // starts after it, and their memory is not reused before its work is done.
  C10_CUDA_CHECK(cudaEventCreateWithFlags(&start_, cudaEventDisableTiming));
  C10_CUDA_CHECK(cudaEventRecord(start_, c10::cuda::getCurrentCUDAStream(device.index())));
  for (const auto& work_stream : work_streams_) {
    C10_CUDA_CHECK(cudaStreamWaitEvent(work_stream.stream(), start_, 0));
    for (size_t k = 0; k < keys; ++k) {
      c10::cuda::CUDACachingAllocator::recordStream(tables_[k].storage().data_ptr(), work_stream);
      c10::cuda::CUDACachingAllocator::recordStream(positions_[k].storage().data_ptr(),
                                                    work_stream);
    }
  }
  extents_.push_back({0, std::move(rows), nullptr});
  steps_ = steps;
  decoded_as_.assign(slots_, -1);
  landed_ = make_marks(1);
  ready_.resize(slots_);
  released_.resize(slots_);
  for (int64_t q = 0; q < slots_; ++q) {
    // The threads wait for a step's copies on the host before they mark it
    // landed: without spinning.
    C10_CUDA_CHECK(
        cudaEventCreateWithFlags(&ready_[q], cudaEventDisableTiming | cudaEventBlockingSync));
    C10_CUDA_CHECK(cudaEventCreateWithFlags(&released_[q], cudaEventDisableTiming));
  }
  for (int64_t w = 0; w < workers; ++w) {
    threads_.emplace_back([this, w] { work(w); });
  }
}

void FrameQueue::check_rows(const std::vector<at::Tensor>& rows) const {
  ROBOCACHE_CHECK_VALUE(rows.size() == widths_.size(), kWhere, ": rows need one tensor per key (",
                        widths_.size(), "); got ", rows.size());
  for (size_t k = 0; k < rows.size(); ++k) {
    const auto& r = rows[k];
    ROBOCACHE_CHECK_VALUE(r.device().is_cpu() && r.scalar_type() == at::kLong && r.dim() == 2 &&
                              r.is_contiguous() && r.size(0) == rows[0].size(0) &&
                              r.size(1) == widths_[k],
                          kWhere, ": rows[", k,
                          "] must be a contiguous (steps, M) int64 host tensor with the steps of "
                          "rows[0] and the key's M (",
                          widths_[k], ")");
  }
}

int64_t FrameQueue::extend(std::vector<at::Tensor> rows, bool written_on_stream) {
  check_rows(rows);
  const int64_t steps = rows[0].size(0);
  std::shared_ptr<CUevent_st> written;
  if (written_on_stream) {
    const auto device = index_of(*decoders_[0]);
    c10::cuda::CUDAGuard guard(device);
    cudaEvent_t event = nullptr;
    C10_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    written.reset(event, [](cudaEvent_t e) { cudaEventDestroy(e); });
    C10_CUDA_CHECK(cudaEventRecord(event, c10::cuda::getCurrentCUDAStream(device).stream()));
  }
  int64_t first = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ROBOCACHE_CHECK(!stopping_, kWhere, ".extend: the queue is closed");
    first = steps_;
    if (steps > 0) {
      extents_.push_back({first, std::move(rows), std::move(written)});
      steps_ += steps;
    }
  }
  changed_.notify_all();
  return first;
}

FrameQueue::Extent FrameQueue::extent_of(int64_t step) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& extent : extents_) {
    if (step >= extent.first && step < extent.first + extent.rows[0].size(0)) {
      return extent;  // held by the caller while it reads its rows
    }
  }
  ROBOCACHE_CHECK(false, kWhere, ": step ", step, " is not one of the steps known");
  return {};
}

FrameQueue::~FrameQueue() {
  if (stop_threads()) {
    follow_work_streams();  // a destructor does not throw
  }
  c10::cuda::CUDAGuard guard(index_of(*decoders_[0]));
  for (int64_t q = 0; q < slots_; ++q) {
    // The staged positions' last copies are done before their memory goes.
    cudaEventSynchronize(ready_[q]);
    cudaEventDestroy(ready_[q]);
    cudaEventDestroy(released_[q]);
  }
  cudaEventDestroy(start_);
}

bool FrameQueue::stop_threads() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) {
      return false;
    }
    stopping_ = true;
  }
  changed_.notify_all();
  for (auto& thread : threads_) {
    if (thread.joinable()) {
      thread.join();
    }
  }
  return true;
}

cudaError_t FrameQueue::follow_work_streams() {
  // Work queued on the work streams may still write the tables (a step that
  // failed part way, or one decoded ahead and never taken): the current
  // CUDA stream waits for it, so that what is queued there next (another
  // queue's start, into the same tables) comes after it.
  c10::cuda::CUDAGuard guard(index_of(*decoders_[0]));
  auto current = c10::cuda::getCurrentCUDAStream(index_of(*decoders_[0]));
  cudaError_t first = cudaSuccess;
  for (const auto& work_stream : work_streams_) {
    cudaEvent_t done = nullptr;
    cudaError_t status = cudaEventCreateWithFlags(&done, cudaEventDisableTiming);
    if (status == cudaSuccess) {
      status = cudaEventRecord(done, work_stream.stream());
      if (status == cudaSuccess) {
        status = cudaStreamWaitEvent(current.stream(), done, 0);
      }
      cudaEventDestroy(done);
    }
    first = first == cudaSuccess ? status : first;
  }
  return first;
}

void FrameQueue::close() {
  if (stop_threads()) {
    C10_CUDA_CHECK(follow_work_streams());
  }
}

void FrameQueue::work(int64_t worker) {
  c10::cuda::CUDAGuard guard(index_of(*decoders_[worker]));
  std::vector<FrameTarget> targets;
  std::vector<std::pair<int64_t, int64_t>> owners;
  const int64_t workers = static_cast<int64_t>(decoders_.size());
  for (int64_t step = worker;; step += workers) {
    {
      // The step once it is known and its slot may be written; none past a
      // step that failed.
      std::unique_lock<std::mutex> lock(mutex_);
      while (!(stopping_ || (failed_step_ >= 0 && failed_step_ < step) ||
               (step < steps_ && step < released_steps_ + ahead_))) {
        // A release does not wake this thread (see release()): it looks
        // again every kReleasePoll.
        changed_.wait_for(lock, kReleasePoll);
      }
      if (stopping_ || (failed_step_ >= 0 && failed_step_ < step)) {
        return;
      }
    }
    bool failed = false;
    try {
      failed = !decode_step(step, worker, targets, owners);
    } catch (const c10::Error& e) {
      fail_at(step, -1, -1, e.what_without_backtrace(), kOther);
      failed = true;
    } catch (const std::exception& e) {
      fail_at(step, -1, -1, e.what(), kOther);
      failed = true;
    } catch (...) {
      fail_at(step, -1, -1, "an unknown error", kOther);
      failed = true;
    }
    if (!failed) {
      // The step is marked landed once its frames are in device memory: a
      // caller reading the mark then needs no wait on any stream.
      const cudaError_t landing = cudaEventSynchronize(ready_[step % slots_]);
      if (landing != cudaSuccess) {
        fail_at(step, -1, -1, cudaGetErrorString(landing), kOther);
        failed = true;
      }
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!failed) {
        decoded_as_[step % slots_] = step;
        while (landed_steps_ < steps_ && decoded_as_[landed_steps_ % slots_] == landed_steps_) {
          ++landed_steps_;
        }
        store_mark(landed_, 0, landed_steps_);
      }
    }
    changed_.notify_all();
    if (failed) {
      return;
    }
  }
}

void FrameQueue::fail_at(int64_t step, int64_t k, int64_t row, const std::string& why,
                         Failure kind) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (failed_step_ < 0 || step < failed_step_) {
    failed_step_ = step;
    failure_ = {k, row, why, kind};
  }
}

int64_t FrameQueue::take(int64_t step) {
  const int64_t slot = step % slots_;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    ROBOCACHE_CHECK_VALUE(step >= released_steps_ && step < steps_, kWhere, ".take: step ", step,
                          " is not one of the steps known and not released (", released_steps_,
                          " to ", steps_ - 1, ")");
    changed_.wait(lock, [&] {
      return stopping_ || decoded_as_[slot] == step || (failed_step_ >= 0 && failed_step_ <= step);
    });
    if (failed_step_ >= 0 && step >= failed_step_) {
      return -1;
    }
    ROBOCACHE_CHECK(decoded_as_[slot] == step, kWhere, ".take: the queue is closed");
  }
  return slot;
}

void FrameQueue::release(int64_t step) {
  const int64_t slot = step % slots_;
  std::lock_guard<std::mutex> lock(mutex_);
  ROBOCACHE_CHECK_VALUE(step == released_steps_ && decoded_as_[slot] == step, kWhere,
                        ".release: steps are released in order, each once taken; expected ",
                        released_steps_, ", got ", step);
  auto cuda_stream = c10::cuda::getCurrentCUDAStream(index_of(*decoders_[0]));
  C10_CUDA_CHECK(cudaEventRecord(released_[slot], cuda_stream.stream()));
  released_steps_ = step + 1;
  while (extents_.size() > 1 && extents_[1].first <= released_steps_) {
    extents_.pop_front();  // every step of it released
  }
  // No notify: the threads see the release within kReleasePoll, and the
  // caller's thread pays no wake-up.
}

std::tuple<int64_t, int64_t, std::string, int64_t> FrameQueue::failure() {
  std::lock_guard<std::mutex> lock(mutex_);
  return failure_;
}

}  // namespace robocache::decoders
