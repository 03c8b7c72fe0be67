// Force-included (-include) by scripts/fuzz.sh only. clang 14 cannot use
// libstdc++ 12's <source_location> (it lacks __builtin_source_location), so
// the fuzz build gets a stand-in with the same name; locations read as empty.
// Every object of the fuzz build sees the same definition, so layouts agree.
#pragma once
#include <cstdint>
#include <version>
#if __has_include(<source_location>)
#include <source_location>
#endif
#if !defined(__cpp_lib_source_location)
namespace std {
struct source_location {
  // constexpr, not consteval: clang 14 rejects consteval calls in default arguments.
  static constexpr source_location current() noexcept { return {}; }
  constexpr uint_least32_t line() const noexcept { return 0; }
  constexpr uint_least32_t column() const noexcept { return 0; }
  constexpr const char* file_name() const noexcept { return ""; }
  constexpr const char* function_name() const noexcept { return ""; }
};
}  // namespace std
#endif
