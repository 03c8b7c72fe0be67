// ir::view_output_strides (kiln/ir/layout.h) follows the runtime's view
// kernels: the strides each view node gives, and the reshapes that copy.
#include <gtest/gtest.h>

#include "kiln/ir/layout.h"
#include "kiln/ir/text.h"
#include "kiln/kiln.h"

namespace kiln::ir {
namespace {

// Each view of a chain from a contiguous [3, 2, 4] input against the eager
// op's result on a tensor of that layout: equal strides where eager views,
// nullopt where its reshape copies.
TEST(ViewLayout, FollowsTheRuntimesViewKernels) {
  auto g = parse(R"(
graph(%0: f64[3, 2, 4] "x") {
  %1 = permute(%0) {dims=[2, 1, 0]} : f64[4, 2, 3]
  %2 = reshape(%1) {shape=[8, 3]} : f64[8, 3]
  %3 = reshape(%1) {shape=[2, 2, 2, 3]} : f64[2, 2, 2, 3]
  %4 = slice(%3) {dim=1, start=0, end=2, step=2} : f64[2, 1, 2, 3]
  %5 = expand(%4) {shape=[5, 2, 4, 2, 3]} : f64[5, 2, 4, 2, 3]
  %6 = slice(%0) {dim=2, start=1, end=4, step=2} : f64[3, 2, 2]
  %7 = reshape(%6) {shape=[6, 2]} : f64[6, 2]
  %8 = reshape(%6) {shape=[3, 4]} : f64[3, 4]
  return %2, %5, %7, %8
}
)");
  const Tensor x = randn({3, 2, 4}, DType::f64);
  std::vector<Tensor> eager{x};  // by value number
  int copies_seen = 0;
  for (const Node* n : g->nodes()) {
    const Tensor& in = eager[static_cast<size_t>(n->inputs[0]->id())];
    const Dims out = eval_shape(n->output()->shape, {});
    std::optional<Dims> st = view_output_strides(*n, n->attrs, in.shape(), in.strides(), out);
    Tensor e;
    if (n->is_op(OpId::permute)) e = in.permute(n->attrs.dims("dims"));
    if (n->is_op(OpId::reshape)) e = in.reshape(out);
    if (n->is_op(OpId::expand)) e = in.expand(out);
    if (n->is_op(OpId::slice))
      e = in.slice(n->attrs.i("dim"), n->attrs.i("start"), n->attrs.i("end"), n->attrs.i("step"));
    ASSERT_TRUE(e.defined()) << op_name(n->op);
    const bool copies = e.impl()->storage != in.impl()->storage;
    copies_seen += copies;
    EXPECT_EQ(!st, copies) << "%" << n->output()->id() << " " << op_name(n->op);
    if (st && !copies) {
      EXPECT_EQ(*st, e.strides()) << "%" << n->output()->id();
    }
    eager.push_back(e);
  }
  EXPECT_EQ(copies_seen, 1);  // %2: merging the permuted dims (4, 2 at strides 1, 4)
}

}  // namespace
}  // namespace kiln::ir
