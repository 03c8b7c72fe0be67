// A printed GPU kernel compiled as C++ (gpu_printer.h: cpp_prelude) with its
// test data, as cuda_cpp_gen writes them into the generated source: the
// sanitized tests (cuda_cpp_test.cpp) link no kiln library, only these.
#pragma once

#include <cstddef>
#include <vector>

namespace kiln_cpp {

/// How a buffer's bytes compare with the expected ones.
enum class Kind { kBytes, kF32, kF64, kF16, kBf16 };

/// One kernel argument's buffer.
struct Buf {
  const unsigned char* init;    ///< contents before the launch (null: bytes 0x5a)
  const unsigned char* expect;  ///< contents after it (null: not checked)
  size_t bytes;
  Kind kind;
  double tol;  ///< relative tolerance of floats; 0: bit for bit (any NaN equals any NaN)
};

/// A kernel, its buffers and the launches to try.
struct Case {
  const char* name;
  std::vector<Buf> bufs;
  std::vector<unsigned> blocks;  ///< blockDim.x values, each tried
  unsigned grid;
  /// Launches the kernel on buffer pointers p over grid x block threads.
  void (*launch)(void** p, unsigned grid, unsigned block);
};

/// The generated cases (cuda_cpp_gen).
const std::vector<Case>& cases();
/// Kernels with a race TSan must report (the check's checks): [0] the column
/// combine with its first barrier removed, [1] scatter_add whose lines share
/// an output element, one line per block.
const std::vector<Case>& racy_cases();

}  // namespace kiln_cpp
