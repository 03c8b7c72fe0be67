// View layouts (see layout.h): the rules of kernel_permute, kernel_expand,
// kernel_slice and kernel_reshape in runtime/src/ops/movement.cpp.
#include "kiln/ir/layout.h"

#include "kiln/error.h"
#include "kiln/functional.h"
#include "kiln/tensor.h"

namespace kiln::ir {

std::optional<Dims> view_output_strides(const Node& n, const Attrs& attrs, const Dims& in_shape,
                                        const Dims& in_strides, const Dims& out_shape) {
  const auto rank = static_cast<int64_t>(in_shape.size());
  Dims o;
  if (n.is_op(OpId::permute)) {
    for (int64_t d : attrs.dims("dims"))
      o.push_back(in_strides[static_cast<size_t>(wrap_dim(d, rank, "permute"))]);
  } else if (n.is_op(OpId::expand)) {
    o = Dims(out_shape.size(), 0);
    const size_t off = out_shape.size() - in_shape.size();
    for (size_t i = off; i < out_shape.size(); ++i)
      o[i] = in_shape[i - off] == 1 && out_shape[i] != 1 ? 0 : in_strides[i - off];
  } else if (n.is_op(OpId::slice)) {
    const auto d = static_cast<size_t>(wrap_dim(attrs.i("dim"), rank, "slice"));
    o = in_strides;
    if (out_shape[d] > 1) o[d] *= attrs.has("step") ? attrs.i("step") : 1;  // else unused
  } else {
    KILN_CHECK(n.is_op(OpId::reshape), "[view_output_strides] ", op_name(n.op), " is no view op");
    if (!view_strides(in_shape, in_strides, out_shape, o)) return std::nullopt;
  }
  return o;
}

}  // namespace kiln::ir
