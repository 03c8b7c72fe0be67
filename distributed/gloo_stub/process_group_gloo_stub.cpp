// Built instead of src/gloo/ when CMake finds no Gloo: the Gloo backend
// reports itself unavailable.
#include "kiln/distributed/process_group.h"
#include "kiln/error.h"

namespace kiln::dist {

std::shared_ptr<ProcessGroup> make_gloo_group(std::shared_ptr<Store>, int, int, ProcessGroupOptions,
                                              const std::string&) {
  kiln::throw_error(
      "[process_group] kiln was built without Gloo (install libgloo-dev and re-run CMake)");
}

}  // namespace kiln::dist
