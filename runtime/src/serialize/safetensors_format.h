// The safetensors format without tensors: header JSON parsing/validation and
// building, shared by the file and in-memory paths (internal to kiln).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/dims.h"
#include "kiln/dtype.h"

namespace kiln::safetensors {

/// The reference implementation's limit on the JSON header (100 MB, decimal).
inline constexpr uint64_t kMaxHeaderBytes = 100'000'000;
/// Sanity bound on a tensor's rank (the format has none; kiln's kernels need few).
inline constexpr size_t kMaxRank = 64;

/// One tensor's header record; offsets are relative to the data buffer.
struct Entry {
  std::string name;
  DType dtype = DType::f32;
  Dims shape;
  uint64_t begin = 0;
  uint64_t end = 0;
};

/// A parsed, validated header: entries sorted by offset, covering the buffer exactly.
struct Header {
  std::vector<Entry> entries;
  std::map<std::string, std::string> metadata;
};

/// The format's dtype string ("F32", "BOOL", ...) for a kiln dtype.
const char* dtype_string(DType t);

/// Write order of the Python package: descending dtype alignment, then by name.
bool write_before(const Entry& a, const Entry& b);

/// Reads the 8-byte prefix and checks the header length against the file size.
/// `where` prefixes errors ("[load] path").
uint64_t header_length(const unsigned char prefix[8], uint64_t file_size, const std::string& where);

/// Parses and validates the JSON header for a data buffer of `data_len` bytes.
Header parse_header(std::string_view json, uint64_t data_len, const std::string& where);

/// The 8-byte length prefix plus the JSON header padded with spaces to 8 bytes.
/// Entries must already carry their final offsets, in file order.
std::string build_header(const std::vector<Entry>& entries,
                         const std::map<std::string, std::string>& metadata,
                         const std::string& where);

/// Test hook: called with the byte count written so far before each write of a
/// save; it may throw to simulate a failure midway (null: no hook).
void set_write_hook(std::function<void(uint64_t bytes_written)> hook);
/// The current write hook (internal).
const std::function<void(uint64_t)>& write_hook();

}  // namespace kiln::safetensors
