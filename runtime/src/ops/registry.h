// Internal: how op families fill the table. Each family file defines one
// register_<family>(OpTable&) that sets the rules of its ops; registry.cpp
// calls them all once (no static constructors).
#pragma once

#include "kiln/op_table.h"

namespace kiln::ops {

/// The mutable table while it is being filled.
struct OpTable {
  OpInfo entries[kNumOps];
  OpInfo& operator[](OpId id) { return entries[static_cast<int>(id)]; }
};

/// An op's traits from ops.def at compile time, so kernels can leave out the
/// loops a trait rules out (e.g. integer loops of kFloatMath ops).
constexpr uint32_t static_traits(OpId id) {
  constexpr uint32_t traits[] = {
#define KILN_OP(name, family, arity, traits) (traits),
#include "kiln/ops.def"
#undef KILN_OP
  };
  return traits[static_cast<int>(id)];
}

void register_unary(OpTable& t);
void register_binary(OpTable& t);
void register_reduce(OpTable& t);
void register_linalg(OpTable& t);
void register_conv(OpTable& t);
void register_movement(OpTable& t);
void register_factory(OpTable& t);
void register_collective(OpTable& t);
void register_scan(OpTable& t);
void register_sort(OpTable& t);

}  // namespace kiln::ops
