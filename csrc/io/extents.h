// Byte extents of a file read whole with positional reads (pread), on the
// calling thread: the encoded frames of a batch, each of its own length.
#pragma once

#include <cstdint>

namespace robocache::io {

// Reads `bytes` at `offset` of `fd` into `target` whole: 0, 1 where the
// file ends first, else errno.
int read_fully(int fd, uint8_t* target, int64_t bytes, int64_t offset);

// Reads extent k (`lengths[k]` bytes at byte `begins[k]` of `fd`) into
// `out + at[k]`, for k in 0..count; extents that follow one another both
// in the file and in `out` are read in one call. Returns -1 where every
// extent is read whole, else the first k that the file ends inside (it was
// cut after it was opened). An error of the OS is raised, naming it.
int64_t read_extents(int fd, const int64_t* begins, const int64_t* lengths, const int64_t* at,
                     int64_t count, uint8_t* out);

}  // namespace robocache::io
