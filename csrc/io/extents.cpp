#include "extents.h"

#include <robocache/error.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace robocache::io {

int read_fully(int fd, uint8_t* target, int64_t bytes, int64_t offset) {
  while (bytes > 0) {
    const size_t ask = static_cast<size_t>(std::min<int64_t>(bytes, int64_t{1} << 30));
    const ssize_t got = ::pread(fd, target, ask, static_cast<off_t>(offset));
    if (got > 0) {
      offset += got;
      target += got;
      bytes -= got;
    } else if (got == 0) {
      return 1;
    } else if (errno != EINTR) {
      return errno == 0 ? EIO : errno;
    }
  }
  return 0;
}

int64_t read_extents(int fd, const int64_t* begins, const int64_t* lengths, const int64_t* at,
                     int64_t count, uint8_t* out) {
  int64_t k = 0;
  while (k < count) {
    int64_t end = k + 1;
    int64_t bytes = lengths[k];
    while (end < count && begins[end] == begins[end - 1] + lengths[end - 1] &&
           at[end] == at[end - 1] + lengths[end - 1]) {
      bytes += lengths[end];
      ++end;
    }
    const int code = read_fully(fd, out + at[k], bytes, begins[k]);
    ROBOCACHE_CHECK(code <= 1, "robocache: reading the file failed: ", std::strerror(code));
    if (code == 1) {
      // The first of the run that the file ends inside.
      struct stat found{};
      const int64_t size = ::fstat(fd, &found) == 0 ? static_cast<int64_t>(found.st_size) : -1;
      for (int64_t j = k; j < end; ++j) {
        if (size < 0 || begins[j] + lengths[j] > size) {
          return j;
        }
      }
      return k;
    }
    k = end;
  }
  return -1;
}

}  // namespace robocache::io
