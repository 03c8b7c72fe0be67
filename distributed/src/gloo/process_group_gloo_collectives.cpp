// The Gloo backend's collectives (process_group_gloo.cpp has the design):
// each checks its arguments, builds the signature compared across ranks and
// queues a run function on the next lane, over shared memory or TCP.
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/reduce.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include <algorithm>
#include <cstring>

#include "gloo_group.h"
#include "kiln/functional.h"

namespace kiln::dist::gloo_backend {

WorkPtr GlooGroup::all_reduce(Tensor t, ReduceOp op) {
  detail::check_cpu_tensor("all_reduce", t);
  detail::check_reducible("all_reduce", t.dtype(), op);
  Millis timeout = opts_.timeout;
  Signature sig = detail::make_signature(CollectiveKind::kAllReduce, 0, t.dtype(),
                                         uint64_t(t.numel()), int(op));
  return collective(
      tensor_op("all_reduce", t, to_string(op)), sig, {t}, [t, op, timeout](const LaneRun& run) {
        if (run.shm) return run.shm->all_reduce({span_of(t)}, t.dtype(), op, run.sig, run.deadline);
        allreduce_raw(run.ctx, run.tag, timeout, t.data_ptr(), size_t(t.numel()), t.dtype(), op);
      });
}

WorkPtr GlooGroup::all_reduce_coalesced(std::vector<Tensor> ts, ReduceOp op) {
  KILN_CHECK(!ts.empty(), "[all_reduce_coalesced] no tensors given");
  int64_t total = 0;
  for (size_t i = 0; i < ts.size(); ++i) {
    detail::check_cpu_tensor("all_reduce_coalesced", ts[i]);
    KILN_CHECK(ts[i].dtype() == ts[0].dtype(), "[all_reduce_coalesced] tensor ", i, " is ",
               ts[i].dtype(), " but tensor 0 is ", ts[0].dtype(), "; all must share a dtype");
    total += ts[i].numel();
  }
  detail::check_reducible("all_reduce_coalesced", ts[0].dtype(), op);
  CollectiveInfo info = tensor_op("all_reduce_coalesced", ts[0], to_string(op));
  info.numel = total;
  info.shape = kiln::str("[", total, " in ", ts.size(), " tensors]");
  Millis timeout = opts_.timeout;
  // The same signature as all_reduce of the flat buffer: that is what moves.
  Signature sig = detail::make_signature(CollectiveKind::kAllReduce, 0, ts[0].dtype(),
                                         uint64_t(total), int(op));
  return collective(std::move(info), sig, ts, [ts, op, total, timeout](const LaneRun& run) {
    DType dt = ts[0].dtype();
    if (run.shm) {  // straight from and into the tensors: no flat copy
      std::vector<shm::Span> spans;
      for (const auto& t : ts) spans.push_back(span_of(t));
      return run.shm->all_reduce(spans, dt, op, run.sig, run.deadline);
    }
    Tensor flat = empty({total}, dt);
    std::byte* p = bytes_of(flat);
    for (const auto& t : ts)
      p = static_cast<std::byte*>(std::memcpy(p, bytes_of(t), nbytes(t))) + nbytes(t);
    allreduce_raw(run.ctx, run.tag, timeout, flat.data_ptr(), size_t(total), dt, op);
    p = bytes_of(flat);
    for (const auto& t : ts) {
      std::memcpy(bytes_of(t), p, nbytes(t));
      p += nbytes(t);
    }
  });
}

// The copy into dst runs on the lane; over shared memory it is fused with the
// reduction (shm::Channel::all_reduce_into).
WorkPtr GlooGroup::all_reduce_into(std::vector<Tensor> srcs, Tensor dst, ReduceOp op) {
  detail::check_all_reduce_into(srcs, dst);
  detail::check_cpu_tensor("all_reduce_into", dst, "dst");
  detail::check_reducible("all_reduce_into", dst.dtype(), op);
  Millis timeout = opts_.timeout;
  Signature sig = detail::make_signature(CollectiveKind::kAllReduce, 0, dst.dtype(),
                                         uint64_t(dst.numel()), int(op));
  return collective(tensor_op("all_reduce_into", dst, to_string(op)), sig, {dst},
                    [srcs, dst, op, timeout](const LaneRun& run) {
                      std::vector<shm::Span> spans;
                      for (const auto& s : srcs) spans.push_back(span_of(s));
                      if (run.shm)
                        return run.shm->all_reduce_into(spans, span_of(dst), dst.dtype(), op,
                                                        run.sig, run.deadline);
                      std::byte* p = bytes_of(dst);
                      for (const auto& s : spans) {
                        if (s.data != p) std::memcpy(p, s.data, s.bytes);
                        p += s.bytes;
                      }
                      allreduce_raw(run.ctx, run.tag, timeout, dst.data_ptr(), size_t(dst.numel()),
                                    dst.dtype(), op);
                    });
}

WorkPtr GlooGroup::broadcast(Tensor t, int root) {
  detail::check_cpu_tensor("broadcast", t);
  check_root("broadcast", root);
  Millis timeout = opts_.timeout;
  Signature sig = detail::make_signature(CollectiveKind::kBroadcast, 0, t.dtype(),
                                         uint64_t(t.numel()), -1, root);
  return collective(tensor_op("broadcast", t, kiln::str("root=", root)), sig, {t},
                    [t, root, timeout](const LaneRun& run) {
                      if (run.shm)
                        return run.shm->broadcast(span_of(t), root, run.sig, run.deadline);
                      if (t.numel() == 0) return;
                      ::gloo::BroadcastOptions o(run.ctx);
                      with_element(t.element_size(), [&](auto e) {
                        using T = decltype(e);
                        o.setOutput(static_cast<T*>(t.data_ptr()), size_t(t.numel()));
                      });
                      o.setRoot(root);
                      o.setTag(run.tag);
                      o.setTimeout(timeout);
                      ::gloo::broadcast(o);
                    });
}

WorkPtr GlooGroup::reduce(Tensor t, int root, ReduceOp op) {
  detail::check_cpu_tensor("reduce", t);
  detail::check_reducible("reduce", t.dtype(), op);
  check_root("reduce", root);
  Millis timeout = opts_.timeout;
  Signature sig = detail::make_signature(CollectiveKind::kReduce, 0, t.dtype(), uint64_t(t.numel()),
                                         int(op), root);
  return collective(tensor_op("reduce", t, kiln::str(to_string(op), " root=", root)), sig, {t},
                    [t, root, op, timeout](const LaneRun& run) {
                      if (run.shm)
                        return run.shm->reduce(span_of(t), t.dtype(), op, root, run.sig,
                                               run.deadline);
                      if (t.numel() == 0) return;
                      size_t n = size_t(t.numel());
                      bool is_root = run.ctx->rank == root;
                      // Gloo uses the output as scratch on every rank: non-roots keep `t` intact.
                      Tensor out = is_root ? t : empty(t.shape(), t.dtype());
                      ::gloo::ReduceOptions o(run.ctx);
                      with_element(t.element_size(), [&](auto e) {
                        using T = decltype(e);
                        if (!is_root) o.setInput(static_cast<T*>(t.data_ptr()), n);
                        o.setOutput(static_cast<T*>(out.data_ptr()), n);
                      });
                      o.setRoot(root);
                      o.setReduceFunction(reduce_fn(t.dtype(), op));
                      o.setTag(run.tag);
                      o.setTimeout(timeout);
                      ::gloo::reduce(o);
                      if (is_root && op == ReduceOp::kAvg)
                        divide_in_place(t.data_ptr(), t.dtype(), n, run.ctx->size);
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
  Millis timeout = opts_.timeout;
  Signature sig =
      detail::make_signature(CollectiveKind::kAllGather, 0, in.dtype(), uint64_t(in.numel()));
  CollectiveInfo info = tensor_op("all_gather", in);
  return collective(std::move(info), sig, outs, [outs, in, timeout](const LaneRun& run) {
    size_t n = size_t(in.numel()), b = nbytes(in);
    if (run.shm) {
      std::vector<shm::Span> spans;
      for (const auto& o : outs) spans.push_back(span_of(o));
      return run.shm->all_gather(spans, span_of(in), run.sig, run.deadline);
    }
    if (n == 0) return;
    Tensor flat = empty({int64_t(n) * run.ctx->size}, in.dtype());
    ::gloo::AllgatherOptions o(run.ctx);
    with_element(in.element_size(), [&](auto e) {
      using T = decltype(e);
      o.setInput(static_cast<T*>(in.data_ptr()), n);
      o.setOutput(static_cast<T*>(flat.data_ptr()), n * size_t(run.ctx->size));
    });
    o.setTag(run.tag);
    o.setTimeout(timeout);
    ::gloo::allgather(o);
    for (size_t r = 0; r < outs.size(); ++r)
      std::memcpy(bytes_of(outs[r]), bytes_of(flat) + r * b, b);
  });
}

// Over TCP, built on all_reduce of a copy (Gloo has no options-API
// reduce-scatter): twice the traffic of a ring reduce-scatter, but simple and
// exact. Over shared memory each rank reduces only its own block.
WorkPtr GlooGroup::reduce_scatter(Tensor out, Tensor in, ReduceOp op) {
  detail::check_cpu_tensor("reduce_scatter", out, "output");
  detail::check_cpu_tensor("reduce_scatter", in, "input");
  detail::check_reducible("reduce_scatter", in.dtype(), op);
  KILN_CHECK(out.dtype() == in.dtype() && in.numel() == out.numel() * size_,
             "[reduce_scatter] the input must hold size() = ", size_, " outputs: got input ",
             in.dtype(), in.shape(), " and output ", out.dtype(), out.shape());
  CollectiveInfo info = tensor_op("reduce_scatter", in, to_string(op));
  Millis timeout = opts_.timeout;
  Signature sig = detail::make_signature(CollectiveKind::kReduceScatter, 0, in.dtype(),
                                         uint64_t(in.numel()), int(op));
  return collective(std::move(info), sig, {out}, [out, in, op, timeout](const LaneRun& run) {
    if (run.shm)
      return run.shm->reduce_scatter(span_of(out), span_of(in), in.dtype(), op, run.sig,
                                     run.deadline);
    if (in.numel() == 0) return;
    Tensor tmp = in.clone();
    allreduce_raw(run.ctx, run.tag, timeout, tmp.data_ptr(), size_t(tmp.numel()), tmp.dtype(), op);
    std::memcpy(bytes_of(out), bytes_of(tmp) + size_t(run.ctx->rank) * nbytes(out), nbytes(out));
  });
}

WorkPtr GlooGroup::barrier() {
  CollectiveInfo info;
  info.op = "barrier";
  Millis timeout = opts_.timeout;
  Signature sig = detail::barrier_signature(0);
  return collective(std::move(info), sig, {}, [timeout](const LaneRun& run) {
    if (run.shm) return run.shm->barrier(run.sig, run.deadline);
    ::gloo::BarrierOptions o(run.ctx);
    o.setTag(run.tag);
    o.setTimeout(timeout);
    ::gloo::barrier(o);
  });
}

}  // namespace kiln::dist::gloo_backend
