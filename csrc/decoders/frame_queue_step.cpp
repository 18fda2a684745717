// One step of FrameQueue's work: the distinct frames its windows read,
// their bytes (read from the store's file, for keys given a file
// descriptor: positional reads, never the map) and their decode into the
// step's slot.
#include <c10/cuda/CUDAException.h>
#include <c10/util/Exception.h>

#include <algorithm>

#include <robocache/error.h>

#include "../io/extents.h"
#include "frame_queue.h"

namespace robocache::decoders {

bool FrameQueue::decode_step(int64_t step, int64_t worker, std::vector<FrameTarget>& targets,
                             std::vector<std::pair<int64_t, int64_t>>& owners) {
  const int64_t slot = step % slots_;
  cudaStream_t cuda_stream = work_streams_[worker].stream();
  const auto& decoder = decoders_[worker];
  // The work stream waits for start_ (from its making) and for the slot's
  // release (below). The hardware engines ignore stream order: with them,
  // the decoder's run waits on the host for what the stream has queued,
  // these waits included.
  if (step >= slots_) {
    // The slot's last step was released on the caller's stream, so it had
    // landed (its copies done) before it was handed over, as ahead <= slots:
    // its staged positions may be written.
    C10_CUDA_CHECK(cudaStreamWaitEvent(cuda_stream, released_[slot], 0));
  }
  targets.clear();
  owners.clear();
  FileReads& reads = file_reads_[static_cast<size_t>(worker)];
  reads.clear();
  int64_t read_bytes = 0;
  std::vector<int64_t> distinct;
  const Extent extent = extent_of(step);
  if (extent.written != nullptr) {
    C10_CUDA_CHECK(cudaEventSynchronize(extent.written.get()));
  }
  const std::vector<at::Tensor>& rows = extent.rows;
  const int64_t in_extent = step - extent.first;
  for (size_t k = 0; k < values_.size(); ++k) {
    const int64_t M = widths_[k];
    const int64_t* wanted = rows[k].data_ptr<int64_t>() + in_extent * M;
    distinct.assign(wanted, wanted + M);
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    distinct.erase(std::remove(distinct.begin(), distinct.end(), int64_t{0}), distinct.end());
    int64_t* position = staged_[k].data_ptr<int64_t>() + slot * M;
    for (int64_t m = 0; m < M; ++m) {
      position[m] = wanted[m] == 0
                        ? 0
                        : 1 + (std::lower_bound(distinct.begin(), distinct.end(), wanted[m]) -
                               distinct.begin());
    }
    const auto& table = tables_[k];
    const int64_t H = table.size(2), W = table.size(3), C = table.size(4);
    uint8_t* base = table.data_ptr<uint8_t>() + slot * table.stride(0);
    const int64_t frames = byte_offsets_[k].numel() - 1;
    const int64_t* bounds = byte_offsets_[k].data_ptr<int64_t>();
    const uint8_t* bytes = values_[k].data_ptr<uint8_t>();
    const int64_t nbytes = values_[k].numel();
    ROBOCACHE_CHECK_VALUE(static_cast<int64_t>(distinct.size()) < table.size(1), kWhere, ": key ",
                          k, ": step ", step, " reads ", distinct.size(),
                          " frames; its table holds ", table.size(1) - 1);
    for (size_t j = 0; j < distinct.size(); ++j) {
      const int64_t row = distinct[j] - 1;
      ROBOCACHE_CHECK_VALUE(row >= 0 && row < frames, kWhere, ": key ", k, ": row ", row,
                            " is not one of its ", frames, " frames");
      const int64_t begin = bounds[row], end = bounds[row + 1];
      ROBOCACHE_CHECK_VALUE(0 <= begin && begin <= end && end <= nbytes, kWhere, ": key ", k,
                            ": the byte offsets of row ", row, " lie outside its values");
      if (files_[k] >= 0) {  // read from the file below; the map is not touched
        reads.target.push_back(targets.size());
        reads.begins.push_back(file_begins_[k] + begin);
        reads.lengths.push_back(end - begin);
        reads.at.push_back(read_bytes);
        read_bytes += end - begin;
      }
      targets.push_back({files_[k] >= 0 ? nullptr : bytes + begin, static_cast<size_t>(end - begin),
                         base + (1 + static_cast<int64_t>(j)) * table.stride(1), H, W, C});
      owners.emplace_back(static_cast<int64_t>(k), row);
    }
  }
  if (!read_files(step, worker, targets, owners)) {
    return false;
  }
  FrameFailure failed = decoder->run(targets, cuda_stream);
  if (failed.index >= 0) {
    fail_at(step, owners[failed.index].first, owners[failed.index].second, failed.why,
            kDoesNotDecode);
    return false;
  }
  for (size_t k = 0; k < values_.size(); ++k) {
    const int64_t M = widths_[k];
    C10_CUDA_CHECK(cudaMemcpyAsync(
        positions_[k].data_ptr<int64_t>() + slot * M, staged_[k].data_ptr<int64_t>() + slot * M,
        static_cast<size_t>(M) * sizeof(int64_t), cudaMemcpyHostToDevice, cuda_stream));
  }
  C10_CUDA_CHECK(cudaEventRecord(ready_[slot], cuda_stream));
  return true;
}

bool FrameQueue::read_files(int64_t step, int64_t worker, std::vector<FrameTarget>& targets,
                            const std::vector<std::pair<int64_t, int64_t>>& owners) {
  FileReads& reads = file_reads_[static_cast<size_t>(worker)];
  const size_t n = reads.target.size();
  if (n == 0) {
    return true;
  }
  reads.scratch.resize(static_cast<size_t>(reads.at.back() + reads.lengths.back()));
  // A key's reads lie together: one call a key.
  for (size_t first = 0, end = 0; first < n; first = end) {
    const int64_t k = owners[reads.target[first]].first;
    end = first + 1;
    while (end < n && owners[reads.target[end]].first == k) {
      ++end;
    }
    int64_t cut = -1;
    try {
      cut = io::read_extents(static_cast<int>(files_[k]), reads.begins.data() + first,
                             reads.lengths.data() + first, reads.at.data() + first,
                             static_cast<int64_t>(end - first), reads.scratch.data());
    } catch (const c10::Error& e) {  // the OS's error: named with the key's first frame read
      fail_at(step, k, owners[reads.target[first]].second, e.what_without_backtrace(), kReadFailed);
      return false;
    }
    if (cut >= 0) {
      fail_at(step, k, owners[reads.target[first + cut]].second,
              "the file ends inside this frame's bytes", kFileEnds);
      return false;
    }
  }
  for (size_t i = 0; i < n; ++i) {
    targets[reads.target[i]].data = reads.scratch.data() + reads.at[i];
  }
  return true;
}

}  // namespace robocache::decoders
