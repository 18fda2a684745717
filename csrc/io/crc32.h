// CRC-32 as zlib computes it (the reflected IEEE polynomial 0xEDB88320), the
// checksum EpisodeStore.save writes for each episode's values.
#pragma once

#include <cstddef>
#include <cstdint>

namespace robocache::io {

// The CRC-32 of `bytes` bytes at `data`, continuing from `crc` (0 to start),
// as zlib.crc32(data, crc).
uint32_t crc32_update(uint32_t crc, const uint8_t* data, size_t bytes);

}  // namespace robocache::io
