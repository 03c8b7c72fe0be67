// The Gloo backend's collectives (process_group_gloo.cpp has the design):
// each checks its arguments, builds the signature compared across ranks and
// queues a run function on the next lane, which hands the bytes to the lane's
// transport (transport.h: shared memory or TCP).

#include <algorithm>
#include <cstring>

#include "gloo_group.h"
#include "kiln/functional.h"

namespace kiln::dist::gloo_backend {

WorkPtr GlooGroup::all_reduce(Tensor t, ReduceOp op) {
  detail::check_cpu_tensor("all_reduce", t);
  detail::check_reducible("all_reduce", t.dtype(), op);
  Signature sig = detail::make_signature(CollectiveKind::kAllReduce, 0, t.dtype(),
                                         uint64_t(t.numel()), int(op));
  return collective(tensor_op("all_reduce", t, to_string(op)), sig, {t},
                    [t, op](const LaneRun& run) {
                      run.transport.all_reduce({span_of(t)}, t.dtype(), op, run.sig, run.deadline);
                    });
}

WorkPtr GlooGroup::all_reduce_coalesced(std::vector<Tensor> ts, ReduceOp op) {
  CollectiveInfo info = detail::coalesced_info(
      ts, op, [](const char* name, const Tensor& t) { detail::check_cpu_tensor(name, t); });
  const int64_t total = info.numel;
  // The same signature as all_reduce of the flat buffer: that is what moves.
  Signature sig = detail::make_signature(CollectiveKind::kAllReduce, 0, ts[0].dtype(),
                                         uint64_t(total), int(op));
  return collective(std::move(info), sig, ts, [ts, op](const LaneRun& run) {
    std::vector<detail::Span> spans;  // straight from and into the tensors where it can
    for (const auto& t : ts) spans.push_back(span_of(t));
    run.transport.all_reduce(spans, ts[0].dtype(), op, run.sig, run.deadline);
  });
}

// The copy into dst runs on the lane; over shared memory it is fused with the
// reduction (shm::Channel::all_reduce_into).
WorkPtr GlooGroup::all_reduce_into(std::vector<Tensor> srcs, Tensor dst, ReduceOp op) {
  detail::check_all_reduce_into(srcs, dst);
  detail::check_cpu_tensor("all_reduce_into", dst, "dst");
  detail::check_reducible("all_reduce_into", dst.dtype(), op);
  Signature sig = detail::make_signature(CollectiveKind::kAllReduce, 0, dst.dtype(),
                                         uint64_t(dst.numel()), int(op));
  return collective(tensor_op("all_reduce_into", dst, to_string(op)), sig, {dst},
                    [srcs, dst, op](const LaneRun& run) {
                      std::vector<detail::Span> spans;
                      for (const auto& s : srcs) spans.push_back(span_of(s));
                      run.transport.all_reduce_into(spans, span_of(dst), dst.dtype(), op, run.sig,
                                                    run.deadline);
                    });
}

WorkPtr GlooGroup::broadcast(Tensor t, int root) {
  detail::check_cpu_tensor("broadcast", t);
  check_root("broadcast", root);
  Signature sig = detail::make_signature(CollectiveKind::kBroadcast, 0, t.dtype(),
                                         uint64_t(t.numel()), -1, root);
  return collective(tensor_op("broadcast", t, kiln::str("root=", root)), sig, {t},
                    [t, root](const LaneRun& run) {
                      run.transport.broadcast(span_of(t), root, run.sig, run.deadline);
                    });
}

WorkPtr GlooGroup::reduce(Tensor t, int root, ReduceOp op) {
  detail::check_cpu_tensor("reduce", t);
  detail::check_reducible("reduce", t.dtype(), op);
  check_root("reduce", root);
  Signature sig = detail::make_signature(CollectiveKind::kReduce, 0, t.dtype(), uint64_t(t.numel()),
                                         int(op), root);
  return collective(tensor_op("reduce", t, kiln::str(to_string(op), " root=", root)), sig, {t},
                    [t, root, op](const LaneRun& run) {
                      run.transport.reduce(span_of(t), t.dtype(), op, root, run.sig, run.deadline);
                    });
}

WorkPtr GlooGroup::all_gather(std::vector<Tensor> outs, Tensor in) {
  detail::check_cpu_tensor("all_gather", in, "input");
  KILN_CHECK(outs.size() == size_t(size_), "[all_gather] needs one output per rank (", size_,
             "); got ", outs.size());
  for (size_t r = 0; r < outs.size(); ++r) {
    detail::check_cpu_tensor("all_gather", outs[r], "output");
    KILN_CHECK(outs[r].dtype() == in.dtype() && outs[r].numel() == in.numel(),
               "[all_gather] output ", r, " is ", outs[r].dtype(), outs[r].shape(),
               " but the input is ", in.dtype(), in.shape());
  }
  Signature sig =
      detail::make_signature(CollectiveKind::kAllGather, 0, in.dtype(), uint64_t(in.numel()));
  CollectiveInfo info = tensor_op("all_gather", in);
  return collective(std::move(info), sig, outs, [outs, in](const LaneRun& run) {
    std::vector<detail::Span> spans;
    for (const auto& o : outs) spans.push_back(span_of(o));
    run.transport.all_gather(spans, span_of(in), run.sig, run.deadline);
  });
}

WorkPtr GlooGroup::reduce_scatter(Tensor out, Tensor in, ReduceOp op) {
  detail::check_cpu_tensor("reduce_scatter", out, "output");
  detail::check_cpu_tensor("reduce_scatter", in, "input");
  detail::check_reducible("reduce_scatter", in.dtype(), op);
  KILN_CHECK(out.dtype() == in.dtype() && in.numel() == out.numel() * size_,
             "[reduce_scatter] the input must hold size() = ", size_, " outputs: got input ",
             in.dtype(), in.shape(), " and output ", out.dtype(), out.shape());
  CollectiveInfo info = tensor_op("reduce_scatter", in, to_string(op));
  Signature sig = detail::make_signature(CollectiveKind::kReduceScatter, 0, in.dtype(),
                                         uint64_t(in.numel()), int(op));
  return collective(std::move(info), sig, {out}, [out, in, op](const LaneRun& run) {
    run.transport.reduce_scatter(span_of(out), span_of(in), in.dtype(), op, run.sig, run.deadline);
  });
}

WorkPtr GlooGroup::barrier() {
  CollectiveInfo info;
  info.op = "barrier";
  Signature sig = detail::barrier_signature(0);
  return collective(std::move(info), sig, {},
                    [](const LaneRun& run) { run.transport.barrier(run.sig, run.deadline); });
}

}  // namespace kiln::dist::gloo_backend
