// Send and recv on the Gloo backend.
//
// Gloo matches a send with a recv by (peer, slot) only and trusts the sizes:
// a send larger than the posted recv aborted the process inside Gloo, a
// smaller one left the rest of the receiving tensor as it was. So when an op
// is issued, each side sends the other a 16-byte header (dtype and element
// count), and the sender posts its payload. The recv posts a buffer for the
// payload only once the sender's header arrived, and of the size the header
// announces: its tensor when the two agree, scratch memory otherwise (the
// connection stays in step and the group usable). Both sides compare the two
// headers and fail with a kiln::Error naming both when they differ.
// Slots: 3*tag sender->receiver header, 3*tag+1 receiver->sender header,
// 3*tag+2 payload. Sends are waited for on the p2p lane in posting order
// (Gloo moves their bytes whatever the lane does); each recv runs on a thread
// of its own, so a recv whose sender has not issued its send yet does not
// hold up the others.
#include <gloo/transport/unbound_buffer.h>

#include <array>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "gloo_group.h"
#include "kiln/error.h"

namespace kiln::dist::gloo_backend {
namespace {

struct Header {
  uint64_t numel = 0;
  uint32_t dtype = 0;
  uint32_t magic = 0;
};
constexpr uint32_t kMagic = 0x6b703270;  // "kp2p"

std::string describe(DType dtype, uint64_t numel) {
  return kiln::str(dtype_name(dtype), " with ", numel, " elements");
}

void wait_buffer(const BufPtr& buf, bool is_send, Millis timeout, int peer) {
  bool ok = false;
  try {
    ok = is_send ? buf->waitSend(nullptr, timeout) : buf->waitRecv(nullptr, timeout);
  } catch (const std::exception& e) {
    throw std::runtime_error(kiln::str(e.what(), " (peer: rank ", peer, ")"));
  }
  if (!ok) kiln::throw_error("aborted: the process group was destroyed");
}

}  // namespace

bool PointToPoint::add(BufPtr b) {
  std::lock_guard lock(mu);
  bufs.push_back(b);
  if (!aborted) return true;
  b->abortWaitSend();
  b->abortWaitRecv();
  return false;
}

void PointToPoint::abort() {
  std::lock_guard lock(mu);
  aborted = true;
  for (auto& b : bufs) {  // each buffer is waited on one way; the other flag stays unused
    b->abortWaitSend();
    b->abortWaitRecv();
  }
}

WorkPtr GlooGroup::point_to_point(const char* op, Tensor t, int peer, int tag, bool is_send) {
  detail::check_cpu_tensor(op, t);
  const char* role = is_send ? "dst" : "src";
  KILN_CHECK(peer >= 0 && peer < size_ && peer != rank_, "[", op, "] ", role, " ", peer,
             " must be another rank of the group (size ", size_, ", this rank ", rank_, ")");
  KILN_CHECK(tag >= 0, "[", op, "] tag must be >= 0; got ", tag);
  CollectiveInfo info = tensor_op(op, t, kiln::str(role, "=", peer, " tag=", tag));
  std::lock_guard lock(issue_mu_);
  info.seq = next_p2p_++;
  if (std::string b = broken(); !b.empty())
    return detail::failed_work(info, where_, log_,
                               kiln::str("[", op, "] ", info.str(), " failed on ", where_,
                                         ": the group is unusable after an earlier failure: ", b));
  uint64_t id = log_->add(info.str());
  auto work =
      std::make_shared<WorkImpl>(info, where_, std::vector<Tensor>{t}, opts_.timeout, log_, id);
  const uint64_t to_receiver = 3 * uint64_t(tag), to_sender = to_receiver + 1,
                 payload = to_receiver + 2;
  // [0]: this side's header, [1]: the peer's.
  auto headers = std::make_shared<std::array<Header, 2>>();
  (*headers)[0] = Header{uint64_t(t.numel()), uint32_t(t.dtype()), kMagic};
  auto p2p = std::make_shared<PointToPoint>();
  BufPtr out, in, sent;
  try {
    out = p2p_->ctx->createUnboundBuffer(&(*headers)[0], sizeof(Header));
    in = p2p_->ctx->createUnboundBuffer(&(*headers)[1], sizeof(Header));
    p2p->add(out);
    p2p->add(in);
    out->send(peer, is_send ? to_receiver : to_sender);
    in->recv(peer, is_send ? to_sender : to_receiver);
    if (is_send && nbytes(t) > 0) {
      sent = p2p_->ctx->createUnboundBuffer(t.data_ptr(), nbytes(t));
      p2p->add(sent);
      sent->send(peer, payload);
    }
  } catch (const std::exception& e) {
    std::string msg = work->failure(kiln::str("Gloo: ", e.what(), " (peer: rank ", peer, ")"));
    {
      std::lock_guard g(broken_mu_);
      if (broken_.empty()) broken_ = msg;
    }
    work->mark_failed(msg);
    return work;
  }
  const Millis timeout = opts_.timeout;
  const int me = rank_;
  auto ctx = p2p_->ctx;
  // The headers, the tensor and the buffers stay alive with the task (and
  // after a failure, until the contexts close).
  RunFn wait = [=](const LaneRun&) {
    if (!is_send) {
      wait_buffer(in, false, timeout, peer);
      const Header h = (*headers)[1];
      if (h.magic != kMagic || h.dtype > uint32_t(DType::b8))
        throw std::runtime_error(kiln::str("rank ", peer, " sent a malformed transfer header"));
      const uint64_t bytes = h.numel * dtype_size(DType(h.dtype));
      const bool fits = h.dtype == uint32_t(t.dtype()) && h.numel == uint64_t(t.numel());
      std::vector<std::byte> scratch(fits ? 0 : bytes);
      if (bytes > 0) {
        BufPtr b = ctx->createUnboundBuffer(fits ? t.data_ptr() : scratch.data(), bytes);
        if (!p2p->add(b)) kiln::throw_error("aborted: the process group was destroyed");
        b->recv(peer, payload);
        wait_buffer(b, false, timeout, peer);
      }
      wait_buffer(out, true, timeout, peer);
    } else {
      wait_buffer(out, true, timeout, peer);
      if (sent) wait_buffer(sent, true, timeout, peer);
      wait_buffer(in, false, timeout, peer);
    }
    const Header& s = (*headers)[is_send ? 0 : 1];
    const Header& r = (*headers)[is_send ? 1 : 0];
    KILN_CHECK(s.dtype == r.dtype && s.numel == r.numel, "the send of rank ", is_send ? me : peer,
               " has ", describe(DType(s.dtype), s.numel), " but the recv of rank ",
               is_send ? peer : me, " has ", describe(DType(r.dtype), r.numel),
               ": a send and its recv must have the same dtype and element count (nothing was "
               "written to the recv's tensor; the group stays usable)");
  };
  Task task{work, std::move(wait), 0, p2p, {}};
  if (is_send) {
    {
      std::lock_guard l(p2p_->mu);
      p2p_->queue.push_back(std::move(task));
    }
    p2p_->cv.notify_one();
  } else {
    {
      std::lock_guard l(recvs_mu_);
      recvs_.push_back(p2p);
    }
    std::thread([this, task = std::move(task)]() mutable { run_recv(std::move(task)); }).detach();
  }
  return work;
}

void GlooGroup::run_recv(Task t) {
  auto p2p = t.p2p;
  if (execute(*p2p_, t)) {
    t = Task{};  // done with the buffers: free them before the group may go
  } else {
    std::lock_guard lock(broken_mu_);
    graveyard_.push_back(std::move(t));
  }
  // Last: the destructor may run as soon as this recv left the list.
  std::lock_guard lock(recvs_mu_);
  std::erase(recvs_, p2p);
  p2p.reset();
  recvs_cv_.notify_all();
}

WorkPtr GlooGroup::send(Tensor t, int dst, int tag) {
  return point_to_point("send", std::move(t), dst, tag, true);
}

WorkPtr GlooGroup::recv(Tensor t, int src, int tag) {
  return point_to_point("recv", std::move(t), src, tag, false);
}

}  // namespace kiln::dist::gloo_backend
