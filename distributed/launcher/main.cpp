// kilnrun: launches a distributed kiln job, one worker process per rank (like
// torchrun). See `kilnrun --help` and launcher.h.
#include <iostream>

#include "launcher.h"

int main(int argc, char** argv) {
  kiln::launcher::Options opts;
  if (auto rc = kiln::launcher::parse_args(argc, argv, opts, std::cout, std::cerr)) return *rc;
  return kiln::launcher::run(opts);
}
