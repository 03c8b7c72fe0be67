// TensorBoard's record framing (TFRecord): each record is
//   uint64 length | uint32 masked CRC32C of the length | data | uint32 masked CRC32C of the data
// with every integer little-endian. The CRC32C comes from Intel's ISA-L.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::tensorboard {

/// CRC32C (Castagnoli) of `data`: crc32c("123456789") == 0xE3069283.
uint32_t crc32c(std::string_view data);

/// TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t mask_crc(uint32_t crc);

/// One framed record holding `data`.
std::string frame_record(std::string_view data);

/// Splits a whole file's bytes into its records' data, checking every length
/// and CRC; `what` names the file in the kiln::Error a corrupt record raises.
/// A truncated last record (a writer still appending) is also an error.
std::vector<std::string> parse_records(std::string_view bytes, const std::string& what);

/// Reads and splits the file at `path` (kiln::Error if unreadable or corrupt).
std::vector<std::string> read_records(const std::string& path);

}  // namespace kiln::tensorboard
