#include "ops/registry.h"

#include <cstring>

namespace kiln {
namespace {

const ops::OpTable& table() {
  static const ops::OpTable* t = [] {
    auto* tb = new ops::OpTable();
    int i = 0;
#define KILN_OP(n, fam, ar, tr)                      \
  tb->entries[i].name = #n;                          \
  tb->entries[i].family = #fam;                      \
  tb->entries[i].arity = ar;                         \
  tb->entries[i].traits = static_cast<uint32_t>(tr); \
  ++i;
#include "kiln/ops.def"
#undef KILN_OP
    ops::register_unary(*tb);
    ops::register_binary(*tb);
    ops::register_reduce(*tb);
    ops::register_linalg(*tb);
    ops::register_conv(*tb);
    ops::register_movement(*tb);
    ops::register_factory(*tb);
    ops::register_collective(*tb);
    ops::register_scan(*tb);
    ops::register_sort(*tb);
    return tb;
  }();
  return *t;
}

}  // namespace

const OpInfo& op_info(OpId id) {
  return table().entries[static_cast<int>(id)];
}

bool op_from_name(const char* name, OpId& out) {
  for (int i = 0; i < kNumOps; ++i) {
    if (std::strcmp(table().entries[i].name, name) == 0) {
      out = static_cast<OpId>(i);
      return true;
    }
  }
  return false;
}

}  // namespace kiln
