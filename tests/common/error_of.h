// Test helper: the message of the kiln::Error a call throws.
#pragma once

#include <string>

#include "kiln/error.h"

namespace kiln::testing {

/// The message of the kiln::Error `f` throws, or "" when it throws none.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace kiln::testing
