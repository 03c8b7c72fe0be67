#include "kiln/env.h"

#include <cstdlib>
#include <cstring>

#include "kiln/error.h"

namespace kiln::env {

std::string get(const char* name, const std::string& fallback) {
  bool known = false;
  for (const auto& v : kRegistry) known = known || std::strcmp(v.name, name) == 0;
  KILN_ASSERT(known, "environment variable ", name, " is not in the registry (env.h)");
  const char* v = std::getenv(name);
  return v ? std::string(v) : fallback;
}

long get_int(const char* name, long fallback) {
  std::string v = get(name);
  if (v.empty()) return fallback;
  char* end = nullptr;
  long r = std::strtol(v.c_str(), &end, 10);
  KILN_CHECK(end && *end == '\0', "[env] ", name, "='", v, "' is not an integer");
  return r;
}

bool get_flag(const char* name, bool fallback) {
  return get_choice(name, {"0", "1"}, fallback ? "1" : "0") == "1";
}

std::string get_choice(const char* name, std::initializer_list<const char*> allowed,
                       const char* fallback) {
  std::string v = get(name);
  if (v.empty()) return fallback;
  std::string list;
  for (const char* a : allowed) {
    if (v == a) return v;
    list += list.empty() ? a : str(", ", a);
  }
  throw_error(str("[env] ", name, "='", v, "': expected one of ", list));
}

}  // namespace kiln::env
