// A read cut into positional reads, and a check's extents (read_pieces.h).
#include "read_pieces.h"

#include <algorithm>

#include "crc32.h"
#include "extents.h"

namespace robocache::io {

void add_pieces(std::vector<Piece>& pieces, const int64_t* rows, int64_t count, int64_t begin,
                int64_t row_bytes, int64_t base) {
  const int64_t gap_rows = std::max<int64_t>(1, kCoalesceBytes / row_bytes);
  const int64_t span_rows = std::max<int64_t>(1, kPieceBytes / row_bytes);
  int64_t i = 0;
  while (i < count) {
    const int64_t first = rows[i];
    int64_t j = i + 1;
    bool whole = true;  // consecutive rows only
    while (j < count && rows[j] - rows[j - 1] <= gap_rows) {
      const bool next_whole = whole && rows[j] == rows[j - 1] + 1;
      if (!next_whole && rows[j] - first + 1 > span_rows) {
        break;
      }
      whole = next_whole;
      ++j;
    }
    if (whole) {
      const int64_t total = (j - i) * row_bytes;
      for (int64_t done = 0; done < total; done += kPieceBytes) {
        pieces.push_back({begin + first * row_bytes + done, std::min(kPieceBytes, total - done),
                          base + i * row_bytes + done, i + done / row_bytes, j, row_bytes, base,
                          false});
      }
    } else {
      pieces.push_back({begin + first * row_bytes, (rows[j - 1] - first + 1) * row_bytes,
                        base + i * row_bytes, i, j, row_bytes, base, true});
    }
    i = j;
  }
}

int check_extent(int fd, const Extent& extent, std::vector<uint8_t>& scratch) {
  uint32_t crc = 0;
  for (int64_t done = 0; done < extent.bytes; done += kPieceBytes) {
    const int64_t size = std::min(kPieceBytes, extent.bytes - done);
    scratch.resize(static_cast<size_t>(size));
    const int code = read_fully(fd, scratch.data(), size, extent.file_offset + done);
    if (code != 0) {
      return code;
    }
    crc = crc32_update(crc, scratch.data(), static_cast<size_t>(size));
  }
  return crc == extent.crc ? 0 : 1;
}

}  // namespace robocache::io
