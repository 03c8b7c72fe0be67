// Checkpoints in Hugging Face's safetensors format: an 8-byte little-endian
// header length, a JSON header (dtype, shape, data_offsets per tensor, optional
// "__metadata__" string map), then the raw row-major little-endian bytes.
// Files written here load with the Python `safetensors` package and back.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "kiln/state_dict.h"

namespace kiln {

/// String -> string annotations stored under the header's "__metadata__" key.
using SafetensorsMetadata = std::map<std::string, std::string>;

/// Writes `tensors` (CPU, non-symbolic; strided ones are made contiguous) to `path`.
/// Atomic: a temp file in the same directory is fsynced, then renamed over `path`.
void save_safetensors(const std::string& path, const StateDict& tensors,
                      const SafetensorsMetadata& metadata = {});

/// Reads and fully validates a safetensors file; entries come in file (offset) order.
/// If `metadata` is given it is replaced by the file's "__metadata__" map.
StateDict load_safetensors(const std::string& path, SafetensorsMetadata* metadata = nullptr);

/// The exact bytes save_safetensors writes: tensors sorted like the Python package
/// (descending dtype alignment, then name), header padded with spaces to 8 bytes.
std::string serialize_safetensors(const StateDict& tensors,
                                  const SafetensorsMetadata& metadata = {});

/// Parses an in-memory safetensors file with load_safetensors's checks; error
/// messages name `name_for_errors`.
StateDict parse_safetensors(std::string_view bytes, const std::string& name_for_errors,
                            SafetensorsMetadata* metadata = nullptr);

/// Saves a state dict as a safetensors checkpoint (alias of save_safetensors).
inline void save(const std::string& path, const StateDict& tensors) {
  save_safetensors(path, tensors);
}

/// Loads a safetensors checkpoint (alias of load_safetensors).
inline StateDict load(const std::string& path) {
  return load_safetensors(path);
}

}  // namespace kiln
