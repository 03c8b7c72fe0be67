// Errors. Two channels: KILN_CHECK for what a user can cause (throws
// kiln::Error tagged with the op), KILN_ASSERT for kiln's own bugs (throws
// kiln::InternalError with file and line). Neither aborts.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace kiln {

/// A problem the user caused: bad shapes, dtypes, indices, misuse of autograd.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A bug in kiln itself: an invariant that should hold did not.
class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

namespace detail {
inline void str_append(std::ostringstream&) {}
template <typename T>
void str_one(std::ostringstream& os, const T& v) {
  if constexpr (requires {
                  v.begin();
                  v.end();
                } &&
                !std::is_convertible_v<T, std::string>) {
    os << '[';
    bool first = true;
    for (const auto& x : v) {
      if (!first) os << ", ";
      first = false;
      os << x;
    }
    os << ']';
  } else {
    os << v;
  }
}
template <typename T, typename... Rest>
void str_append(std::ostringstream& os, const T& v, const Rest&... rest) {
  str_one(os, v);
  str_append(os, rest...);
}
}  // namespace detail

/// Concatenates the arguments with operator<<; ranges print as [a, b, c].
template <typename... Args>
std::string str(const Args&... args) {
  std::ostringstream os;
  detail::str_append(os, args...);
  return os.str();
}

[[noreturn]] void throw_error(const std::string& msg);
[[noreturn]] void throw_internal(const char* file, int line, const std::string& msg);

}  // namespace kiln

/// User-facing check: KILN_CHECK(cond, "[op] message ", value, ...).
#define KILN_CHECK(cond, ...)                                   \
  do {                                                          \
    if (!(cond)) ::kiln::throw_error(::kiln::str(__VA_ARGS__)); \
  } while (0)

/// Internal invariant: a failure is a kiln bug, reported with file and line.
#define KILN_ASSERT(cond, ...)                                                            \
  do {                                                                                    \
    if (!(cond))                                                                          \
      ::kiln::throw_internal(__FILE__, __LINE__, ::kiln::str(#cond, " ", ##__VA_ARGS__)); \
  } while (0)
