// Registry checks over the whole op table: every primitive has its rules, a
// derivative exactly when it is differentiable, conformance cases, and a name
// that round-trips through op_from_name.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "op_cases.h"

using namespace kiln;
using namespace kiln::conformance;

namespace {

// Verifies every primitive has an infer rule and a kernel, and a vjp iff it lacks kNonDiff.
TEST(Registry, EveryOpHasRules) {
  for (int i = 0; i < kNumOps; ++i) {
    const OpInfo& info = op_info(static_cast<OpId>(i));
    SCOPED_TRACE(info.name ? info.name : "(unnamed)");
    ASSERT_NE(info.name, nullptr);
    EXPECT_NE(info.family, nullptr);
    EXPECT_NE(info.infer, nullptr) << "missing infer rule";
    EXPECT_NE(info.kernel, nullptr) << "missing kernel";
    if (info.has(kNonDiff)) {
      EXPECT_EQ(info.vjp, nullptr) << "has a vjp despite kNonDiff";
    } else {
      EXPECT_NE(info.vjp, nullptr) << "differentiable op without a vjp";
    }
  }
}

// Verifies trait invariants (factories take no inputs, views are movement ops, masks fit arity).
TEST(Registry, TraitsAreConsistent) {
  for (int i = 0; i < kNumOps; ++i) {
    const OpInfo& info = op_info(static_cast<OpId>(i));
    SCOPED_TRACE(info.name);
    EXPECT_EQ(info.has(kFactory), info.arity == 0);
    if (info.has(kView)) {
      EXPECT_TRUE(info.has(kMovement));
    }
    if (info.has(kRandom)) {
      EXPECT_TRUE(info.has(kFactory) && info.has(kNonDiff));
    }
    if (info.arity >= 0 && info.arity < 32) {
      EXPECT_EQ(info.nondiff_inputs >> info.arity, 0u) << "nondiff_inputs names a missing input";
    }
  }
}

// kPredicate (a bool result computed in the operands' promoted dtype, which
// the eager kernels, the kernel IR's checks, lowering and the CUDA runtime
// read from the table) is exactly the elementwise ops whose infer rule gives
// bool.
TEST(Registry, PredicatesAreTheElementwiseOpsGivingBool) {
  for (int i = 0; i < kNumOps; ++i) {
    const OpId id = static_cast<OpId>(i);
    const OpInfo& info = op_info(id);
    if (!info.has(kElementwise) || id == OpId::where || id == OpId::cast) continue;
    SCOPED_TRACE(info.name);
    std::vector<Tensor> in;
    for (int j = 0; j < info.arity; ++j) in.push_back(zeros({2}, j == 0 ? DType::f32 : DType::f64));
    std::vector<TensorMeta> out;
    info.infer(in, Attrs(), out);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(info.has(kPredicate), out[0].dtype == DType::b8);
    if (info.has(kPredicate)) {
      EXPECT_TRUE(info.has(kNonDiff));
    }
  }
}

// Verifies op_from_name round-trips every name, names are unique, and unknown names fail.
TEST(Registry, NamesRoundTrip) {
  std::set<std::string> seen;
  for (int i = 0; i < kNumOps; ++i) {
    const OpId id = static_cast<OpId>(i);
    OpId back = OpId::neg;
    ASSERT_TRUE(op_from_name(op_name(id), back)) << op_name(id);
    EXPECT_EQ(back, id) << op_name(id);
    EXPECT_TRUE(seen.insert(op_name(id)).second) << "duplicate name " << op_name(id);
  }
  OpId dummy = OpId::neg;
  EXPECT_FALSE(op_from_name("no_such_op", dummy));
  EXPECT_FALSE(op_from_name("", dummy));
  EXPECT_FALSE(op_from_name("Add", dummy));
}

// Verifies every primitive has conformance cases of each required kind (and gradcheck cases).
TEST(Registry, EveryOpHasConformanceCases) {
  for (int i = 0; i < kNumOps; ++i) {
    const OpId id = static_cast<OpId>(i);
    const OpInfo& info = op_info(id);
    SCOPED_TRACE(info.name);
    // Collectives have side effects (other ranks); collective_test.cpp covers them.
    if (info.has(kCollective)) continue;
    std::vector<OpCase> cases = op_cases(id);
    ASSERT_FALSE(cases.empty()) << "no conformance case";
    std::set<Kind> kinds;
    bool grad = false;
    for (const OpCase& c : cases) {
      kinds.insert(c.kind);
      grad = grad || c.grad;
      EXPECT_TRUE(static_cast<bool>(c.ref)) << c.name << " has no reference";
      if (info.arity >= 0) {
        EXPECT_EQ(static_cast<int>(c.inputs.size()), info.arity) << c.name;
      }
    }
    EXPECT_TRUE(kinds.count(Kind::kContiguous)) << "no contiguous case";
    EXPECT_TRUE(kinds.count(Kind::kZeroSize)) << "no zero-size case";
    if (info.arity != 0) {
      EXPECT_TRUE(kinds.count(Kind::kStrided)) << "no strided case";
    }
    const bool broadcasts = std::string(info.family) == "binary" && info.arity >= 2;
    if (broadcasts || id == OpId::matmul || id == OpId::expand) {
      EXPECT_TRUE(kinds.count(Kind::kBroadcast)) << "no broadcast case";
    }
    EXPECT_EQ(grad, !info.has(kNonDiff)) << "gradcheck cases exactly for differentiable ops";
  }
}

}  // namespace
