// A JPEG frame's entropy-coded data decoded into its blocks' coefficients:
// its Huffman tables built, its bits read (unstuffed, stopping at markers),
// each block's codes decoded, restart markers followed (see jpeg.h).
#pragma once

#include <cstdint>

#include "host_device.h"
#include "jpeg.h"

namespace robocache::jpeg {

// The table's codes from its counts (`spec`: 16 counts, then the values),
// checked by the header read: maxcode and valoffset. Returns the number of
// values, for copy_values.
ROBOCACHE_HD int32_t build_codes(const uint8_t* spec, HuffmanTable& table) {
  int32_t code = 0, index = 0;
  for (int length = 1; length <= 16; ++length) {
    const int32_t n = spec[length - 1];
    table.valoffset[length] = index - code;
    table.maxcode[length] = n > 0 ? code + n - 1 : -1;
    code = (code + n) << 1;
    index += n;
  }
  table.maxcode[0] = -1;
  table.valoffset[0] = 0;
  table.maxcode[17] = 0x7FFFFFFF;  // ends the search for a longer code
  table.valoffset[17] = 0;
  return index;
}

// Values first, first + stride, ... of the table's `n`; and its lookup's
// entries zeroed likewise (a warp fills its table together).
ROBOCACHE_HD void copy_values(const uint8_t* spec, HuffmanTable& table, int32_t n, int first,
                              int stride) {
  for (int32_t i = first; i < n; i += stride) {
    table.values[i] = spec[16 + i];
  }
  for (int32_t e = first; e < (1 << kLookaheadBits); e += stride) {
    table.lookup[e] = 0;
  }
}

// The lookup entries of codes up to kLookaheadBits long, the j-th code of
// each length for j = first, first + stride, ..., once build_codes and
// copy_values are done.
ROBOCACHE_HD void fill_lookup(const uint8_t* spec, HuffmanTable& table, int first, int stride) {
  for (int length = 1; length <= kLookaheadBits; ++length) {
    const int32_t n = spec[length - 1];
    const int32_t first_code = table.maxcode[length] - n + 1;
    const int shift = kLookaheadBits - length;
    for (int32_t j = first; j < n; j += stride) {
      const int32_t code = first_code + j;
      const uint16_t entry =
          static_cast<uint16_t>((length << 8) | table.values[table.valoffset[length] + code]);
      for (int32_t e = code << shift, end = (code + 1) << shift; e < end; ++e) {
        table.lookup[e] = entry;
      }
    }
  }
}

// The entropy-coded data as bits, 0xFF00 unstuffed; a marker or the data's
// end stops the reading, and zeros are read past it (as libjpeg does), each
// counted, so that a decode that used them is known to have run out.
struct BitReader {
  const uint8_t* data;
  int64_t position, size;
  uint64_t bits;         // the next bits, from the top
  int32_t count;         // bits held in `bits`
  int32_t zeros;         // of those, zeros past the data's end
  int32_t marker;        // the marker that stopped the reading (0: none; -1: the data's end)
  int64_t after_marker;  // the byte after it
};

ROBOCACHE_HD void start_reading(BitReader& reader, const uint8_t* data, int64_t begin,
                                int64_t size) {
  reader.data = data;
  reader.position = begin;
  reader.size = size;
  reader.bits = 0;
  reader.count = 0;
  reader.zeros = 0;
  reader.marker = 0;
  reader.after_marker = 0;
}

// At least 57 bits held.
ROBOCACHE_HD void fill_bits(BitReader& reader) {
  // Bytes that need no unstuffing, read together.
  if (reader.marker == 0 && reader.position + 8 <= reader.size) {
    const int want = (64 - reader.count) >> 3;
    uint64_t word = 0;
    bool stuffed = false;
    ROBOCACHE_UNROLL
    for (int i = 0; i < 8; ++i) {
      if (i < want) {
        const uint32_t byte = reader.data[reader.position + i];
        stuffed |= byte == 0xFF;
        word = (word << 8) | byte;
      }
    }
    if (!stuffed) {
      reader.bits |= word << (64 - reader.count - 8 * want);
      reader.count += 8 * want;
      reader.position += want;
      return;
    }
  }
  while (reader.count <= 56) {
    if (reader.marker != 0) {
      reader.count += 8;  // zeros, past the data
      reader.zeros += 8;
      continue;
    }
    if (reader.position >= reader.size) {
      reader.marker = -1;
      continue;
    }
    uint32_t byte = reader.data[reader.position];
    if (byte == 0xFF) {
      // 0xFF 0x00 is a data byte 0xFF (after any fill bytes 0xFF); 0xFF and
      // anything else, a marker.
      int64_t next = reader.position + 1;
      while (next < reader.size && reader.data[next] == 0xFF) {
        ++next;
      }
      if (next >= reader.size) {
        reader.marker = -1;
        continue;
      }
      if (reader.data[next] != 0) {
        reader.marker = reader.data[next];
        reader.after_marker = next + 1;
        continue;
      }
      reader.position = next + 1;
    } else {
      ++reader.position;
    }
    reader.bits |= static_cast<uint64_t>(byte) << (56 - reader.count);
    reader.count += 8;
  }
}

ROBOCACHE_HD void skip_bits(BitReader& reader, int n) {
  reader.bits <<= n;
  reader.count -= n;
}

// The next n bits (1 <= n <= 16) as a number.
ROBOCACHE_HD int32_t take_bits(BitReader& reader, int n) {
  const int32_t value = static_cast<int32_t>(reader.bits >> (64 - n));
  skip_bits(reader, n);
  return value;
}

// Whether the decode read past the data into the zeros after it.
ROBOCACHE_HD bool ran_out(const BitReader& reader) {
  return reader.count < reader.zeros;
}

// The value of the next code (at least 16 bits held), or -1 where the bits
// are no code of the table.
ROBOCACHE_HD int32_t decode_symbol(BitReader& reader, const HuffmanTable& table) {
  const uint32_t entry = table.lookup[reader.bits >> (64 - kLookaheadBits)];
  if (entry != 0) {
    skip_bits(reader, static_cast<int>(entry >> 8));
    return static_cast<int32_t>(entry & 0xFF);
  }
  const uint32_t next16 = static_cast<uint32_t>(reader.bits >> 48);
  for (int length = kLookaheadBits + 1; length <= 16; ++length) {
    const int32_t code = static_cast<int32_t>(next16 >> (16 - length));
    if (code <= table.maxcode[length]) {
      skip_bits(reader, length);
      return table.values[table.valoffset[length] + code];
    }
  }
  return -1;
}

// The signed value of `bits`, n of them, as JPEG codes magnitudes.
ROBOCACHE_HD int32_t extend(int32_t bits, int n) {
  return bits < (1 << (n - 1)) ? bits - (1 << n) + 1 : bits;
}

// One block's coefficients into `block` (64, natural order, zeroed by the
// caller: only those not zero are written); `dc` the component's DC
// prediction; `order` the natural order (fill_natural_order).
ROBOCACHE_HD int32_t decode_block(BitReader& reader, const HuffmanTable& dc_table,
                                  const HuffmanTable& ac_table, const uint8_t* order, int32_t& dc,
                                  int16_t* block) {
  if (reader.count < 32) {
    fill_bits(reader);
  }
  int32_t s = decode_symbol(reader, dc_table);
  if (s < 0) {
    return kBadHuffmanCode;
  }
  if (s > 0) {
    s = extend(take_bits(reader, s), s);
  }
  dc = static_cast<int32_t>(static_cast<uint32_t>(dc) + static_cast<uint32_t>(s));  // wraps
  block[0] = static_cast<int16_t>(dc);
  for (int k = 1; k < 64; ++k) {
    if (reader.count < 32) {
      fill_bits(reader);
    }
    const int32_t rs = decode_symbol(reader, ac_table);
    if (rs < 0) {
      return kBadHuffmanCode;
    }
    const int run = rs >> 4, size = rs & 15;
    if (size > 0) {
      k += run;
      block[order[k]] = static_cast<int16_t>(extend(take_bits(reader, size), size));
    } else if (run == 15) {
      k += 15;  // sixteen zeros
    } else {
      break;  // the rest are zeros
    }
  }
  return kDecoded;
}

// The code of the marker at byte `at` (0xFF, any fill bytes 0xFF, then its
// code), `after` set to the byte after it; 0 where no marker starts there.
ROBOCACHE_HD int32_t marker_at(const uint8_t* data, int64_t size, int64_t at, int64_t& after) {
  if (at >= size || data[at] != 0xFF) {
    return 0;
  }
  while (at < size && data[at] == 0xFF) {
    ++at;
  }
  if (at >= size || data[at] == 0) {
    return 0;
  }
  after = at + 1;
  return data[at];
}

// The code of the marker that follows the bits read, where no more than the
// padding of their last byte lies between (`after` set past it); 0 where
// more data lies before it, -1 where the data ends first.
ROBOCACHE_HD int32_t marker_after_bits(const BitReader& reader, int64_t& after) {
  if (reader.count - reader.zeros >= 8) {
    return 0;
  }
  if (reader.marker != 0) {
    after = reader.after_marker;
    return reader.marker;
  }
  return marker_at(reader.data, reader.size, reader.position, after);
}

// Past the restart marker `number` (0 to 7) that ends an interval, found
// right after the interval's data (libjpeg skips other bytes before it, with
// a warning; here they are corruption); reading starts again after it.
ROBOCACHE_HD bool restart(BitReader& reader, int number) {
  int64_t after = 0;
  if (marker_after_bits(reader, after) != 0xD0 + number) {
    return false;
  }
  start_reading(reader, reader.data, after, reader.size);
  return true;
}

// A frame's scan decoded: each component's blocks into its coefficients
// (`coefficients[c]`, blocks_x * blocks_y blocks of 64, zeroed by the
// caller). Returns a ScanStatus.
ROBOCACHE_HD int32_t decode_scan(const uint8_t* data, int64_t size, const FrameLayout& frame,
                                 const HuffmanTable* tables, const uint8_t* order,
                                 int16_t* const* coefficients) {
  BitReader reader;
  start_reading(reader, data, frame.scan_begin, size);
  int32_t dc[kMaxComponents] = {0, 0, 0};
  const bool interleaved = frame.components > 1;
  const int64_t mcus_x = interleaved ? frame.mcus_x : frame.component[0].blocks_x;
  const int64_t mcus = mcus_x * (interleaved ? frame.mcus_y : frame.component[0].blocks_y);
  int32_t to_restart = frame.restart_interval;
  int next_restart = 0;
  for (int64_t mcu = 0; mcu < mcus; ++mcu) {
    if (frame.restart_interval > 0) {
      if (to_restart == 0) {
        if (!restart(reader, next_restart)) {
          return kBadRestart;
        }
        next_restart = (next_restart + 1) & 7;
        dc[0] = dc[1] = dc[2] = 0;
        to_restart = frame.restart_interval;
      }
      --to_restart;
    }
    const int64_t mcu_y = mcu / mcus_x, mcu_x = mcu - mcu_y * mcus_x;
    for (int c = 0; c < frame.components; ++c) {
      const Component& component = frame.component[c];
      const int h = interleaved ? component.h : 1, v = interleaved ? component.v : 1;
      for (int y = 0; y < v; ++y) {
        for (int x = 0; x < h; ++x) {
          const int64_t at = (mcu_y * v + y) * component.blocks_x + mcu_x * h + x;
          const int32_t status =
              decode_block(reader, tables[component.dc_table], tables[component.ac_table], order,
                           dc[c], coefficients[c] + at * 64);
          if (status != kDecoded) {
            return status;
          }
        }
      }
    }
    if (ran_out(reader)) {
      return kEndsEarly;  // no further: the rest would be zeros
    }
  }
  // After the last block: the bits that pad its byte, then the end-of-image
  // marker (after a restart marker, which libjpeg skips).
  int64_t after = 0;
  int32_t marker = marker_after_bits(reader, after);
  if (marker >= 0xD0 && marker <= 0xD7) {
    marker = marker_at(reader.data, reader.size, after, after);
  }
  return marker == 0xD9 ? kDecoded : kBadEnd;
}

}  // namespace robocache::jpeg
