#include "kiln/error.h"

namespace kiln {

void throw_error(const std::string& msg) {
  throw Error(msg);
}

void throw_internal(const char* file, int line, const std::string& msg) {
  throw InternalError(str("kiln internal error at ", file, ":", line, ": ", msg,
                          " (this is a bug in kiln; please report it)"));
}

}  // namespace kiln
