#include "jpeg_header.h"

#include <climits>

namespace robocache::jpeg {
namespace {

// The markers read (the rest are skipped by their length).
constexpr int kSOF0 = 0xC0, kSOF1 = 0xC1, kDHT = 0xC4, kSOI = 0xD8, kEOI = 0xD9, kSOS = 0xDA,
              kDQT = 0xDB, kDRI = 0xDD, kAPP0 = 0xE0, kAPP14 = 0xEE, kTEM = 0x01;

int32_t be16(const uint8_t* p) {
  return (p[0] << 8) | p[1];
}

bool is_restart(int code) {
  return code >= 0xD0 && code <= 0xD7;
}

// Other codings of a frame than sequential Huffman: progressive, lossless,
// hierarchical and arithmetic-coded.
bool is_other_frame(int code) {
  return (code >= 0xC2 && code <= 0xCF) && code != kDHT && code != 0xC8 && code != 0xCC;
}

// Where the frame's tables and components lie, as read so far.
struct Seen {
  int32_t quant_at[4] = {-1, -1, -1, -1};
  bool quant_16bit[4] = {false, false, false, false};
  int32_t huffman_at[2][4] = {{-1, -1, -1, -1}, {-1, -1, -1, -1}};  // [class][number]
  bool huffman_valid[2][4] = {};
  bool frame = false, jfif = false, adobe = false;
  int32_t adobe_transform = -1;
  int32_t width = 0, height = 0, components = 0, restart_interval = 0;
  int32_t id[kMaxComponents] = {}, h[kMaxComponents] = {}, v[kMaxComponents] = {},
          quant[kMaxComponents] = {}, dc[kMaxComponents] = {}, ac[kMaxComponents] = {};
};

void outcome(HeaderRead& read, Outcome what, const char* why) {
  read.outcome = what;
  read.why = why;
}

// Whether a table's counts make a code as libjpeg accepts one: at most 256
// values, and each length's codes fitting it with the all-ones code unused;
// `values`: their sum, whatever it is.
bool valid_counts(const uint8_t* counts, int32_t& values) {
  int32_t code = 0;
  values = 0;
  bool fits = true;
  for (int length = 1; length <= 16; ++length) {
    code += counts[length - 1];
    values += counts[length - 1];
    fits &= code < (1 << length);
    code <<= 1;
  }
  return fits && values <= 256;
}

bool read_dht(const uint8_t* data, int32_t at, int32_t end, Seen& seen) {
  while (at < end) {
    if (end - at < 17) {
      return false;
    }
    const int table_class = data[at] >> 4, number = data[at] & 15;
    if (table_class > 1 || number > 3) {
      return false;
    }
    int32_t values = 0;
    const bool valid = valid_counts(data + at + 1, values);
    if (values > 256 || at + 17 + values > end) {
      return false;
    }
    // A table that is no valid code is malformed only where a scan uses it
    // (read_header), as libjpeg checks it.
    seen.huffman_at[table_class][number] = at + 1;
    seen.huffman_valid[table_class][number] = valid;
    at += 17 + values;
  }
  return true;
}

bool read_dqt(const uint8_t* data, int32_t at, int32_t end, Seen& seen) {
  while (at < end) {
    const int precision = data[at] >> 4, number = data[at] & 15;
    if (precision > 1 || number > 3 || at + 1 + 64 * (precision + 1) > end) {
      return false;
    }
    seen.quant_at[number] = at + 1;
    seen.quant_16bit[number] = precision == 1;
    at += 1 + 64 * (precision + 1);
  }
  return true;
}

// The frame's size and components; false where it is malformed, with
// `read` set where it is not supported.
bool read_sof(const uint8_t* data, int32_t at, int32_t length, Seen& seen, HeaderRead& read) {
  if (seen.frame || length < 8) {
    return false;
  }
  seen.frame = true;
  const int precision = data[at];
  seen.height = be16(data + at + 1);
  seen.width = be16(data + at + 3);
  seen.components = data[at + 5];
  if (length != 8 + 3 * seen.components || seen.width == 0) {
    return false;
  }
  if (precision != 8) {
    outcome(read, Outcome::kNotSupported, "its samples are not of 8 bits");
    return true;
  }
  if (seen.height == 0) {
    outcome(read, Outcome::kNotSupported, "its height is given after its scan (a DNL marker)");
    return true;
  }
  if (seen.components != 1 && seen.components != 3) {
    outcome(read, Outcome::kNotSupported, "it has other than 1 or 3 components");
    return true;
  }
  for (int c = 0; c < seen.components; ++c) {
    const uint8_t* p = data + at + 6 + 3 * c;
    seen.id[c] = p[0];
    seen.h[c] = p[1] >> 4;
    seen.v[c] = p[1] & 15;
    seen.quant[c] = p[2];
    if (seen.h[c] < 1 || seen.h[c] > 4 || seen.v[c] < 1 || seen.v[c] > 4 || seen.quant[c] > 3) {
      return false;
    }
    if (seen.h[c] > 2 || seen.v[c] > 2) {
      outcome(read, Outcome::kNotSupported, "a component's sampling factor is above 2");
    }
  }
  return true;
}

bool read_sos(const uint8_t* data, int32_t at, int32_t length, Seen& seen, HeaderRead& read) {
  if (length < 3) {
    return false;
  }
  const int n = data[at];
  if (!seen.frame || length != 2 * n + 6 || n < 1 || n > 4) {
    return false;
  }
  if (n != seen.components) {
    outcome(read, Outcome::kNotSupported, "its components are in more than one scan");
    return true;
  }
  for (int c = 0; c < n; ++c) {
    const uint8_t* p = data + at + 1 + 2 * c;
    if (p[0] != seen.id[c]) {
      outcome(read, Outcome::kNotSupported, "its scan's components are not in the frame's order");
      return true;
    }
    seen.dc[c] = p[1] >> 4;
    seen.ac[c] = p[1] & 15;
    if (seen.dc[c] > 3 || seen.ac[c] > 3) {
      return false;
    }
  }
  return true;
}

int32_t divide_up(int32_t a, int32_t b) {
  return (a + b - 1) / b;
}

// The layout from what was read, the scan starting at `scan_begin`.
void lay_out(const uint8_t* data, const Seen& seen, int32_t scan_begin, HeaderRead& read) {
  FrameLayout& frame = read.layout;
  frame = FrameLayout{};
  frame.width = seen.width;
  frame.height = seen.height;
  frame.components = seen.components;
  frame.restart_interval = seen.restart_interval;
  frame.scan_begin = scan_begin;
  if (seen.components == 1) {
    frame.color = kGrey;
  } else if (seen.jfif) {
    frame.color = kYCbCr;
  } else if (seen.adobe) {
    frame.color = seen.adobe_transform == 0 ? kRGB : kYCbCr;
  } else {
    frame.color = seen.id[0] == 'R' && seen.id[1] == 'G' && seen.id[2] == 'B' ? kRGB : kYCbCr;
  }
  int32_t hmax = 1, vmax = 1;
  for (int c = 0; c < seen.components; ++c) {
    hmax = seen.h[c] > hmax ? seen.h[c] : hmax;
    vmax = seen.v[c] > vmax ? seen.v[c] : vmax;
  }
  frame.mcus_x = divide_up(seen.width, 8 * hmax);
  frame.mcus_y = divide_up(seen.height, 8 * vmax);
  // Each table used once, in a slot of its own.
  int32_t slot_of[2][4] = {{-1, -1, -1, -1}, {-1, -1, -1, -1}};
  auto slot = [&](int table_class, int number) {
    int32_t& s = slot_of[table_class][number];
    if (s < 0) {
      s = frame.tables++;
      frame.table_at[s] = seen.huffman_at[table_class][number];
    }
    return s;
  };
  for (int c = 0; c < seen.components; ++c) {
    Component& component = frame.component[c];
    component.h = seen.h[c];
    component.v = seen.v[c];
    component.dc_table = slot(0, seen.dc[c]);
    component.ac_table = slot(1, seen.ac[c]);
    component.width = divide_up(seen.width * seen.h[c], hmax);
    component.height = divide_up(seen.height * seen.v[c], vmax);
    if (seen.components == 1) {
      component.blocks_x = divide_up(component.width, 8);
      component.blocks_y = divide_up(component.height, 8);
    } else {
      component.blocks_x = frame.mcus_x * seen.h[c];
      component.blocks_y = frame.mcus_y * seen.v[c];
    }
    const bool wide = hmax / seen.h[c] == 2, tall = vmax / seen.v[c] == 2;
    // libjpeg upsamples by interpolation where a component is over 2 samples wide.
    const bool fancy = component.width > 2;
    component.upsampling = wide && tall ? (fancy ? kH2V2Fancy : kH2V2Box)
                           : wide       ? (fancy ? kH2V1Fancy : kH2V1Box)
                           : tall       ? kH1V2Fancy
                                        : kFullSize;
    uint8_t order[kNaturalOrderEntries];
    fill_natural_order(order, 0, 1);
    const uint8_t* quant = data + seen.quant_at[seen.quant[c]];
    const bool wide_entries = seen.quant_16bit[seen.quant[c]];
    for (int k = 0; k < 64; ++k) {
      read.quant[c][order[k]] =
          wide_entries ? static_cast<uint16_t>(be16(quant + 2 * k)) : quant[k];
    }
  }
}

}  // namespace

void read_header(const uint8_t* data, int64_t size, HeaderRead& read) {
  read.outcome = Outcome::kMalformed;
  read.why = "";
  if (size < 4 || data[0] != 0xFF || data[1] != kSOI) {
    outcome(read, Outcome::kMalformed, "it does not start as a JPEG does (no SOI marker)");
    return;
  }
  if (size > INT32_MAX) {  // the layout's offsets are 32-bit
    outcome(read, Outcome::kNotSupported, "it is over 2 GiB");
    return;
  }
  Seen seen;
  int64_t at = 2;
  while (true) {
    // The next marker, after any bytes that are not one (which libjpeg skips).
    while (at + 1 < size && !(data[at] == 0xFF && data[at + 1] != 0xFF && data[at + 1] != 0)) {
      ++at;
    }
    if (at + 1 >= size) {
      outcome(read, Outcome::kMalformed, "it ends before its scan");
      return;
    }
    const int code = data[at + 1];
    at += 2;
    if (is_restart(code) || code == kTEM) {
      continue;
    }
    if (code == kSOI || code == kEOI) {
      outcome(read, Outcome::kMalformed, "a start or end of image marker comes before its scan");
      return;
    }
    if (at + 2 > size) {
      outcome(read, Outcome::kMalformed, "it ends inside a marker");
      return;
    }
    const int32_t length = be16(data + at);
    if (length < 2 || at + length > size) {
      outcome(read, Outcome::kMalformed, "a marker's length runs past its end");
      return;
    }
    const int32_t begin = static_cast<int32_t>(at + 2), end = static_cast<int32_t>(at + length);
    bool well_formed = true;
    if (code == kSOF0 || code == kSOF1) {
      well_formed = read_sof(data, begin, length, seen, read);
    } else if (is_other_frame(code)) {
      outcome(read, Outcome::kNotSupported,
              "it is not a sequential Huffman-coded JPEG (progressive, lossless or arithmetic)");
      return;
    } else if (code == kDHT) {
      well_formed = read_dht(data, begin, end, seen);
    } else if (code == kDQT) {
      well_formed = read_dqt(data, begin, end, seen);
    } else if (code == kDRI) {
      well_formed = length == 4;
      seen.restart_interval = well_formed ? be16(data + begin) : 0;
    } else if (code == kAPP0) {
      seen.jfif =
          seen.jfif || (length >= 16 && data[begin] == 'J' && data[begin + 1] == 'F' &&
                        data[begin + 2] == 'I' && data[begin + 3] == 'F' && data[begin + 4] == 0);
    } else if (code == kAPP14) {
      if (length >= 14 && data[begin] == 'A' && data[begin + 1] == 'd' && data[begin + 2] == 'o' &&
          data[begin + 3] == 'b' && data[begin + 4] == 'e') {
        seen.adobe = true;
        seen.adobe_transform = data[begin + 11];
      }
    } else if (code == kSOS) {
      well_formed = read_sos(data, begin, length, seen, read);
      if (well_formed && read.why[0] == '\0') {
        for (int c = 0; c < seen.components; ++c) {
          if (seen.quant_at[seen.quant[c]] < 0) {
            outcome(read, Outcome::kMalformed, "a component's quantization table is not defined");
            return;
          }
          for (int table_class = 0; table_class < 2; ++table_class) {
            const int number = table_class == 0 ? seen.dc[c] : seen.ac[c];
            if (seen.huffman_at[table_class][number] < 0) {
              // libjpeg-turbo then takes the standard tables (Motion JPEG).
              outcome(read, Outcome::kNotSupported, "it has no Huffman tables of its own");
              return;
            }
            if (!seen.huffman_valid[table_class][number]) {
              outcome(read, Outcome::kMalformed, "a Huffman table it uses is not a valid code");
              return;
            }
          }
          const uint8_t* dc = data + seen.huffman_at[0][seen.dc[c]];
          int32_t values = 0;
          valid_counts(dc, values);
          for (int32_t i = 0; i < values; ++i) {
            if (dc[16 + i] > 15) {
              outcome(read, Outcome::kMalformed, "a DC Huffman table has a value above 15");
              return;
            }
          }
        }
        if (end >= size) {
          outcome(read, Outcome::kMalformed, "it ends at the start of its scan");
          return;
        }
        lay_out(data, seen, end, read);
        outcome(read, Outcome::kTaken, "");
      }
      if (well_formed) {
        return;
      }
    }
    if (!well_formed) {
      outcome(read, Outcome::kMalformed, "a marker's contents are malformed");
      return;
    }
    if (read.outcome == Outcome::kNotSupported) {
      return;
    }
    at += length;
  }
}

}  // namespace robocache::jpeg
