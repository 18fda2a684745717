// FrameQueue's reads of a step's encoded frames from the store's file
// (keys given a file descriptor): positional reads, never the map.
#include <c10/util/Exception.h>

#include "../io/extents.h"
#include "frame_queue.h"

namespace robocache::decoders {

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
