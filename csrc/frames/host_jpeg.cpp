#include "host_jpeg.h"

#include <robocache/error.h>
#include <robocache/jpeg_entropy.h>
#include <robocache/jpeg_pixels.h>

#include <vector>

namespace robocache::decoders {

std::string refusal(const jpeg::HeaderRead& read, const FrameTarget& frame) {
  if (read.outcome != jpeg::Outcome::kTaken) {
    return read.why;
  }
  const jpeg::FrameLayout& layout = read.layout;
  if (layout.height != frame.height || layout.width != frame.width) {
    return wrong_size(layout.height, layout.width, frame);
  }
  if (layout.components == 3 && frame.channels == 1) {
    return "a colour frame for a grey stream";
  }
  return "";
}

const char* scan_failure(int32_t status) {
  switch (status) {
    case jpeg::kBadHuffmanCode:
      return "its entropy-coded data holds a bit string that is no Huffman code (corrupt)";
    case jpeg::kEndsEarly:
      return "its entropy-coded data ends before its last block (cut short or corrupt)";
    case jpeg::kBadRestart:
      return "a restart marker is missing, out of order or not right after its interval's data "
             "(corrupt)";
    case jpeg::kBadEnd:
      return "its data does not end after its last block with an end-of-image marker (corrupt)";
    case jpeg::kOutOfRange:
      return "its coefficients lie past any 8-bit image's (corrupt)";
    default:
      return "its entropy-coded data is corrupt";
  }
}

std::string decode_on_host(const FrameTarget& frame) {
  using namespace jpeg;
  HeaderRead read;
  read_header(frame.data, static_cast<int64_t>(frame.size), read);
  std::string refused = refusal(read, frame);
  if (!refused.empty()) {
    return refused;
  }
  const FrameLayout& layout = read.layout;
  std::vector<HuffmanTable> tables(static_cast<size_t>(layout.tables));
  for (int t = 0; t < layout.tables; ++t) {
    const uint8_t* spec = frame.data + layout.table_at[t];
    const int32_t values = build_codes(spec, tables[t]);
    copy_values(spec, tables[t], values, 0, 1);
    fill_lookup(spec, tables[t], 0, 1);
  }
  uint8_t order[kNaturalOrderEntries];
  fill_natural_order(order, 0, 1);
  std::vector<std::vector<int16_t>> coefficients(static_cast<size_t>(layout.components));
  std::vector<std::vector<uint8_t>> samples(static_cast<size_t>(layout.components));
  int16_t* planes[kMaxComponents] = {nullptr, nullptr, nullptr};
  const uint8_t* rows[kMaxComponents] = {nullptr, nullptr, nullptr};
  int64_t strides[kMaxComponents] = {0, 0, 0};
  for (int c = 0; c < layout.components; ++c) {
    const Component& component = layout.component[c];
    const int64_t blocks = int64_t{component.blocks_x} * component.blocks_y;
    coefficients[c].assign(static_cast<size_t>(blocks * 64), 0);
    samples[c].assign(static_cast<size_t>(blocks * 64), 0);
    planes[c] = coefficients[c].data();
    rows[c] = samples[c].data();
    strides[c] = int64_t{component.blocks_x} * 8;
  }
  const int32_t status = decode_scan(frame.data, static_cast<int64_t>(frame.size), layout,
                                     tables.data(), order, planes);
  if (status != kDecoded) {
    return scan_failure(status);
  }
  for (int c = 0; c < layout.components; ++c) {
    const Component& component = layout.component[c];
    for (int64_t by = 0; by < component.blocks_y; ++by) {
      for (int64_t bx = 0; bx < component.blocks_x; ++bx) {
        if (!idct_block(planes[c] + (by * component.blocks_x + bx) * 64, read.quant[c],
                        samples[c].data() + by * 8 * strides[c] + bx * 8, strides[c])) {
          return scan_failure(kOutOfRange);
        }
      }
    }
  }
  for (int32_t y = 0; y < layout.height; ++y) {
    for (int32_t x = 0; x < layout.width; ++x) {
      write_pixel(layout, rows, strides, y, x, static_cast<int>(frame.channels),
                  frame.out + (int64_t{y} * layout.width + x) * frame.channels);
    }
  }
  return "";
}

}  // namespace robocache::decoders
