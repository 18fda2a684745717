// JPEG frames decoded ahead on native threads: for each step, the distinct
// frames its windows read, decoded in one call into a ring of device
// tables, with no Python and no GIL on those threads (each with its own
// decoder and CUDA stream, taking the steps in turn, so that one step's
// decode overlaps the next's). The caller takes a step's table (its
// frames already in device memory when it is handed over), gathers its
// windows from it, and releases it for the step `slots` later. The steps
// are numbered on from one epoch to the next: `extend` appends an epoch's
// steps while the last one's are still taken, and the threads decode on
// into them.
#pragma once

#include <ATen/ATen.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <torch/custom_class.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "frame_decoder.h"

namespace robocache::decoders {

class FrameQueue : public torch::CustomClassHolder {
 public:
  // How often a thread waiting for a release looks at the steps released
  // (a release does not wake it).
  static constexpr std::chrono::microseconds kReleasePoll{200};

  // For each key k: values[k] (n_k,) uint8 and byte_offsets[k] (N_k + 1,)
  // int64, the frames' bytes in host memory; files[k]: -1, or a file
  // descriptor whose bytes from file_begins[k] on are values[k]'s, read from
  // it with positional reads (values[k], a map of that file, is then never
  // read); rows[k] (steps, M_k) int64
  // host, each step's window positions as row + 1 (0: no sample);
  // tables[k] (slots, 1 + F_k, H, W, C) uint8 on the decoder's device, F_k
  // the most distinct frames a step reads (row 0 of each slot is zeros: the
  // frame of "no sample"); positions[k]
  // (slots, M_k) int64 there, where each window position's frame lies in
  // its slot's table; ahead: the steps past the last one released that may
  // be decoded (at most slots: the slots past it let the hardware engines,
  // which write as soon as they are called, wait for the release of a slot
  // the caller's stream let go of steps ago, rather than just now); workers:
  // the threads (at most ahead). The steps of rows are numbered from 0.
  FrameQueue(c10::intrusive_ptr<FrameDecoder> decoder, std::vector<at::Tensor> values,
             std::vector<at::Tensor> byte_offsets, std::vector<int64_t> files,
             std::vector<int64_t> file_begins, std::vector<at::Tensor> rows,
             std::vector<at::Tensor> tables, std::vector<at::Tensor> positions, int64_t ahead,
             int64_t workers);
  ~FrameQueue() override;

  // Appends the steps of `rows` (one (steps, M_k) int64 host tensor per
  // key, M_k as the constructor's) after the steps known; returns the
  // number of the first. `written_on_stream`: the rows are written by work
  // queued on the current CUDA stream (a copy from the device), which the
  // threads wait for before they read them.
  int64_t extend(std::vector<at::Tensor> rows, bool written_on_stream);
  // The slot holding `step`, its frames in device memory (the threads mark
  // a step decoded once its frames have landed: see landed()), so that any
  // CUDA stream may read it with no wait; -1 where that step's frames did
  // not decode (failure() says which and why). Waits on the host only while
  // the step is still being decoded.
  int64_t take(int64_t step);
  // A (1,) int64 CPU tensor the threads write and the caller may read
  // without a call: 1 + the last step of an unbroken run from step 0 whose
  // frames lie in its slot in device memory (its copies done), so that
  // reading it needs no wait on any stream. A step below it is in slot
  // step % slots until it is released.
  at::Tensor landed() const { return landed_; }
  // The step's table is no longer read once the work queued on the current
  // CUDA stream so far is done: its slot may take the step `slots` later.
  // Wakes no thread: a thread waiting for it sees it within kReleasePoll.
  void release(int64_t step);
  // What a step's failure was about (failure()'s last item).
  enum Failure : int64_t {
    kDoesNotDecode = 0,  // a frame's bytes
    kFileEnds = 1,       // the key's file ends inside a frame's bytes (cut after it was opened)
    kReadFailed = 2,     // reading a frame's bytes from the key's file failed (`why`)
    kOther = 3,          // no frame's: (-1, -1, why, kOther)
  };
  // (key, row, why, Failure) of the first step that failed.
  std::tuple<int64_t, int64_t, std::string, int64_t> failure();
  // Stops the threads (after the steps they are decoding, if any); the
  // current CUDA stream then waits for the work they queued (once).
  void close();

 private:
  static constexpr const char* kWhere = "FrameQueue";  // errors begin with it
  // Stops the threads; false where they were stopped before.
  bool stop_threads();
  // The current CUDA stream made to wait for the work streams' work.
  cudaError_t follow_work_streams();
  void work(int64_t worker);
  // The checks of one extent's rows (`steps` of them, or any where -1).
  void check_rows(const std::vector<at::Tensor>& rows) const;
  // The steps from `first` on: one (steps, M_k) tensor per key, and the
  // event after which they hold their values (null: they do now).
  struct Extent {
    int64_t first;
    std::vector<at::Tensor> rows;
    std::shared_ptr<CUevent_st> written;
  };
  // The extent holding `step`.
  Extent extent_of(int64_t step);
  // Records that a step failed at key k's row (-1, -1: no frame's), and
  // why; the earliest step's failure is kept.
  void fail_at(int64_t step, int64_t k, int64_t row, const std::string& why, Failure kind);
  // The bytes of the targets whose keys are read from files (file_reads_[worker]),
  // read into the worker's scratch; false where a read failed (recorded).
  bool read_files(int64_t step, int64_t worker, std::vector<FrameTarget>& targets,
                  const std::vector<std::pair<int64_t, int64_t>>& owners);
  bool decode_step(int64_t step, int64_t worker, std::vector<FrameTarget>& targets,
                   std::vector<std::pair<int64_t, int64_t>>& owners);

  std::vector<c10::intrusive_ptr<FrameDecoder>> decoders_;  // one a worker
  std::vector<at::Tensor> values_, byte_offsets_, tables_, positions_, staged_;
  std::vector<int64_t> widths_;  // M_k: each key's window positions a step
  std::vector<int64_t> files_, file_begins_;
  // Each worker's reads of a step's frames from files: the target, where its
  // bytes lie in the file, their length and where they land in its scratch
  // (host memory: the decoders are done with a step's bytes when they return).
  struct FileReads {
    std::vector<size_t> target;
    std::vector<int64_t> begins, lengths, at;
    std::vector<uint8_t> scratch;
    void clear() {
      target.clear();
      begins.clear();
      lengths.clear();
      at.clear();
    }
  };
  std::vector<FileReads> file_reads_;
  int64_t slots_, ahead_;
  std::vector<c10::cuda::CUDAStream> work_streams_;  // one a worker
  cudaEvent_t start_ = nullptr;                      // the caller's stream when the queue was made
  std::vector<cudaEvent_t> ready_, released_;

  std::mutex mutex_;
  std::condition_variable changed_;
  // The steps known, in extents (those released dropped).
  std::deque<Extent> extents_;
  int64_t steps_ = 0;
  std::vector<int64_t> decoded_as_;  // each slot: the step decoded into it (-1: none yet)
  at::Tensor landed_;                // see landed(); written under mutex_, read by the caller
  int64_t landed_steps_ = 0;         // its value
  int64_t released_steps_ = 0;       // steps released by the caller
  int64_t failed_step_ = -1;
  std::tuple<int64_t, int64_t, std::string, int64_t> failure_{-1, -1, "", kOther};
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace robocache::decoders
