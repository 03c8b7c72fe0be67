// Shared by the CUDA printer tests: printed kernel text compared with a golden
// file under tests/codegen/cuda/golden (KILN_GOLDEN_DIR).
#pragma once

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

namespace kiln::testing {

/// An unintended change of printed code shows here. If it is intended, copy
/// the printed file (its path is in the failure) over the golden one.
inline void expect_golden(const std::string& file, const std::string& got) {
  // The source tree's path from the build, else relative to the working
  // directory (a bundle run from the repository root on another machine).
  // (a path, not string concatenation: GCC 12's -Warray-bounds misreads that.)
  std::string path = (std::filesystem::path(KILN_GOLDEN_DIR) / file).string();
  if (!std::filesystem::exists(path)) path = "tests/codegen/cuda/golden/" + file;
  std::string want = "(missing)";
  if (std::filesystem::exists(path)) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    want = ss.str();
  }
  if (got != want) {
    const auto fresh = std::filesystem::temp_directory_path() / ("kiln_" + file);
    std::ofstream(fresh) << got;
    FAIL() << "printed code differs from " << path << " (new version written to " << fresh << "):\n"
           << got;
  }
}

}  // namespace kiln::testing
