// How the row reader cuts its reads into positional reads (pread): the rows
// of a read coalesced into runs and cut into pieces, and a check's extents
// read a piece at a time against their CRC-32.
#pragma once

#include <cstdint>
#include <vector>

namespace robocache::io {

// Rows closer than this many bytes are read as one run (the gap read into
// scratch and dropped): a page, which the kernel reads whole anyway.
constexpr int64_t kCoalesceBytes = int64_t{4} << 10;
// No read is longer than this, so that a long run is read by several
// threads at once.
constexpr int64_t kPieceBytes = int64_t{1} << 20;

// One pread call's worth of a read: `bytes` at `file_offset`. Straight into
// the output at `out_offset`, or, where `gapped`, into scratch, from which
// rows[first..end) of `row_bytes` each are copied out to `base + i *
// row_bytes` (the rows between them dropped).
struct Piece {
  int64_t file_offset;
  int64_t bytes;
  int64_t out_offset;
  int64_t first;  // the first row's position in rows
  int64_t end;
  int64_t row_bytes;
  int64_t base;
  bool gapped;
};

// The pieces of reading rows[0..count) (strictly increasing) of row_bytes
// each, row r at begin + r * row_bytes, into base + i * row_bytes: rows
// whose gaps are under kCoalesceBytes in one run, runs of consecutive rows
// cut into pieces of at most kPieceBytes, runs with gaps kept to kPieceBytes
// of the file.
void add_pieces(std::vector<Piece>& pieces, const int64_t* rows, int64_t count, int64_t begin,
                int64_t row_bytes, int64_t base);

// One extent of a check: `bytes` at `file_offset`, whose CRC-32 must be `crc`.
struct Extent {
  int64_t file_offset;
  int64_t bytes;
  uint32_t crc;
};

// Whether an extent's bytes have its CRC-32 (read a piece at a time into
// `scratch`): 0, 1 where they differ or the file ends first, else errno.
int check_extent(int fd, const Extent& extent, std::vector<uint8_t>& scratch);

}  // namespace robocache::io
