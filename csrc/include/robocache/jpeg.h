// Sequential (baseline and extended) Huffman-coded JPEG decoding as
// libjpeg-turbo decodes it by default, which is how Pillow and torchvision
// decode: the entropy decode (jpeg_entropy.h), then the accurate integer
// inverse DCT (jpeg_idct_islow), "fancy" triangle-filter chroma upsampling
// and its fixed-point YCbCr -> RGB (jpeg_pixels.h). Each step is a function
// the host decoder (csrc/frames/host_jpeg.cpp) and the CUDA kernels
// (csrc/cuda/jpeg_kernels.cuh) share, so that both give the same pixels.
// The host reads each frame's headers first (csrc/frames/jpeg_header.h):
// what reaches these functions is a frame whose tables and layout have been
// checked; only its entropy-coded data may still be corrupt, which they
// report rather than read past. This header: what a frame's decode knows
// of it.
#pragma once

#include <cstdint>

#include "host_device.h"

namespace robocache::jpeg {

constexpr int kMaxComponents = 3;
// Huffman codes up to this long are decoded by one table lookup.
constexpr int kLookaheadBits = 9;
// Each frame's Huffman tables: a DC and an AC table for each component at most.
constexpr int kMaxTables = 2 * kMaxComponents;

// How a component's samples come to the image's size.
enum Upsampling : int32_t {
  kFullSize = 0,  // as many samples as pixels
  kH2V1Fancy,     // half as wide, linear between sample centres
  kH1V2Fancy,     // half as tall, likewise
  kH2V2Fancy,     // half as wide and tall, likewise in both
  kH2V1Box,       // half as wide, each sample repeated (libjpeg: 2 samples wide or fewer)
  kH2V2Box,
};

enum Color : int32_t { kGrey = 0, kYCbCr = 1, kRGB = 2 };

// Why a frame's entropy-coded data did not decode (kDecoded: it did).
enum ScanStatus : int32_t {
  kDecoded = 0,
  kBadHuffmanCode = 1,  // bits that are no code of the table
  kEndsEarly = 2,       // the data ends (or a marker comes) before the last block
  kBadRestart = 3,      // a restart marker missing, out of order or after other data
  kBadEnd = 4,          // after the last block, more data or no end-of-image marker
  kOutOfRange = 5,      // a block's coefficients past any 8-bit image's (see idct_block)
};

struct Component {
  int32_t h, v;                // sampling factors
  int32_t dc_table, ac_table;  // indices into FrameLayout::table_at
  int32_t blocks_x, blocks_y;  // its plane's blocks, dummy blocks of partial MCUs included
  int32_t width, height;       // its samples (libjpeg's downsampled size)
  int32_t upsampling;          // Upsampling
};

// What the header read gives the decode: a frame's geometry and where its
// Huffman tables and entropy-coded data lie in its bytes.
struct FrameLayout {
  int32_t width, height;
  int32_t components;  // 1 or 3, each in the one scan, in frame order
  int32_t color;       // Color
  int32_t mcus_x, mcus_y;
  int32_t restart_interval;  // MCUs between restart markers (0: none)
  int32_t scan_begin;        // the first byte of the entropy-coded data
  int32_t tables;
  // Each table's 16 counts of codes by length, its values after them.
  int32_t table_at[kMaxTables];
  Component component[kMaxComponents];
};

// One component of one frame in a batch: its blocks' coefficients (64
// each, in natural order, the blocks in raster order) and their samples
// after the inverse DCT (blocks_x * 8 a row).
struct Plane {
  int32_t frame;  // its frame's place in the batch
  int32_t blocks_x, blocks_y;
  int64_t coefficients;  // offset of its first block's, in int16 units
  int64_t samples;       // offset of its first row, in bytes
  int64_t first_block;   // its first block's number among the batch's blocks
  uint16_t quant[64];    // its quantization table, in natural order
};

// A Huffman table as the decoder uses it (libjpeg's derived table).
struct HuffmanTable {
  int32_t maxcode[18];    // the largest code of each length; -1: no code that long
  int32_t valoffset[18];  // a code's value index less the code, by length
  // (length << 8) | value for each kLookaheadBits-bit prefix of a code at
  // most that long; 0 where the code is longer.
  uint16_t lookup[1 << kLookaheadBits];
  uint8_t values[256];
};

// Entries of a table of the position of each coefficient of the zigzag
// order in the natural (row-major) order: 64, then 16 more for the runs a
// corrupt block can make past the last (63, as libjpeg's table), so that
// reading it needs no check. Entries first, first + stride, ... are filled
// (a warp fills its copy together).
constexpr int kNaturalOrderEntries = 80;
ROBOCACHE_HD void fill_natural_order(uint8_t* order, int first, int stride) {
  constexpr uint8_t kOrder[64] = {0,  1,  8,  16, 9,  2,  3,  10, 17, 24, 32, 25, 18, 11, 4,  5,
                                  12, 19, 26, 33, 40, 48, 41, 34, 27, 20, 13, 6,  7,  14, 21, 28,
                                  35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51,
                                  58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63};
  for (int k = first; k < kNaturalOrderEntries; k += stride) {
    order[k] = k < 64 ? kOrder[k] : 63;
  }
}

}  // namespace robocache::jpeg
