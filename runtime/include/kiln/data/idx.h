// The IDX file format of MNIST / Fashion-MNIST: magic 00 00 <type> <rank>,
// `rank` big-endian u32 dims, then the elements big-endian, row-major.
#pragma once

#include <string>

#include "kiln/tensor.h"

namespace kiln::data {

/// Reads an IDX file, gzip-compressed (detected by the 1f 8b magic) or raw.
/// Type codes: 0x08 u8 -> u8, 0x09 i8 -> i32, 0x0B i16 -> i32, 0x0C i32 -> i32,
/// 0x0D f32 -> f32, 0x0E f64 -> f64. Rank must be 1..8.
/// Strict: a bad magic, type code or rank, a dims product that overflows, data
/// shorter than the header says, a corrupt gzip stream, and trailing bytes after
/// the (decompressed) data all raise kiln::Error naming the file; bytes after the
/// end of the gzip stream are ignored, as gunzip does. Allocation is capped by what
/// the file can hold (its size; for gzip its size times deflate's maximum ratio).
Tensor read_idx(const std::string& path);

/// Writes `t` (u8, i32, f32 or f64) as an IDX file, gzip-compressed if `gzip`.
/// Raises kiln::Error for other dtypes, rank 0 or > 8, or an I/O failure.
void write_idx(const std::string& path, const Tensor& t, bool gzip = false);

}  // namespace kiln::data
