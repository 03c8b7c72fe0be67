// Test helper shared by the op tests: expect a kiln::Error whose message
// contains given parts.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <initializer_list>
#include <string>

#include "kiln/error.h"

namespace kiln::testing {

/// f must throw kiln::Error; its message must contain every one of `parts`.
inline void expect_error(const std::function<void()>& f, std::initializer_list<const char*> parts) {
  try {
    f();
    ADD_FAILURE() << "expected kiln::Error";
  } catch (const Error& e) {
    std::string m = e.what();
    for (const char* p : parts) EXPECT_NE(m.find(p), std::string::npos) << m << " lacks " << p;
  }
}

/// f must throw kiln::Error whose message contains `needle`.
inline void expect_error(const std::function<void()>& f, const std::string& needle) {
  expect_error(f, {needle.c_str()});
}

}  // namespace kiln::testing
