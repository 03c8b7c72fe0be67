// The registry of every KILN_* environment variable (documented in README.md).
#pragma once

#include <string>

namespace kiln::env {

/// One documented environment variable.
struct EnvVar {
  const char* name;
  const char* default_value;
  const char* meaning;
};

/// Every KILN_* variable kiln reads, in one list.
inline constexpr EnvVar kRegistry[] = {
    {"KILN_NUM_THREADS", "number of cores", "threads of the intra-op pool (and OpenBLAS)"},
    {"KILN_EAGER", "0", "1 runs kiln::compile'd functions eagerly (later issue)"},
};

/// Value of a registered variable, or its fallback when unset. Asking for an
/// unregistered name is a kiln bug (InternalError).
std::string get(const char* name, const std::string& fallback = "");
/// Integer value of a registered variable, or `fallback`; a non-integer value
/// is a kiln::Error naming the variable.
long get_int(const char* name, long fallback);

}  // namespace kiln::env
