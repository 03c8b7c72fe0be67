// dlopen over candidate paths (shared_library.h).
#include "kiln/shared_library.h"

#include <dlfcn.h>

namespace kiln {

void* open_shared_library(std::initializer_list<std::string> paths, const std::string& what,
                          std::string& why) {
  std::string tried;
  for (const std::string& path : paths) {
    if (void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
    const char* e = dlerror();
    tried += "\n  " + path + ": " + (e ? e : "?");
  }
  why = what + " could not be loaded:" + tried;
  return nullptr;
}

}  // namespace kiln
