// The collectives over one lane's shared-memory channel (see shm_world.h for
// the counters and slots). An all-reduce step: every rank copies a chunk of
// its input into its slot; rank r reduces the r-th share of the chunk across
// all slots into its own slot (the average's division fused into the last
// pass); then every rank copies all shares out. Shares start on 64-byte
// boundaries so two ranks never write one cache line.
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <ctime>

#include "kiln/error.h"
#include "reduce_kernels.h"
#include "shm/shm_world.h"

namespace kiln::dist::shm {

namespace {

namespace kernels = detail;

// Spins before sleeping on the futex: long enough to catch a peer that is a
// few microseconds behind, short enough not to steal a core from compute.
constexpr int kSpins = 200;
// Sleeps are sliced so that a dead or departed peer is noticed quickly.
constexpr auto kSlice = std::chrono::milliseconds(20);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

inline bool reached(uint32_t value, uint32_t target) {
  return int32_t(value - target) >= 0;  // counters wrap
}

void futex_wait(uint32_t* addr, uint32_t expected, std::chrono::nanoseconds d) {
  timespec ts{time_t(d.count() / 1000000000), long(d.count() % 1000000000)};
  ::syscall(SYS_futex, addr, FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake(uint32_t* addr) {
  ::syscall(SYS_futex, addr, FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

// Copies `bytes` between the flat byte range [off, off + bytes) of `spans`
// and `buf` (to the spans if kToSpans); a part already in place is skipped.
template <bool kToSpans>
void copy_spans(const std::vector<Span>& spans, size_t off, std::byte* buf, size_t bytes) {
  for (const Span& s : spans) {
    if (bytes == 0) return;
    if (off >= s.bytes) {
      off -= s.bytes;
      continue;
    }
    const size_t n = std::min(bytes, s.bytes - off);
    if (s.data + off != buf) {  // a span may be the very range it is copied to
      if constexpr (kToSpans) {
        std::memcpy(s.data + off, buf, n);
      } else {
        std::memcpy(buf, s.data + off, n);
      }
    }
    buf += n;
    bytes -= n;
    off = 0;
  }
}

// Where flat byte `off` of `spans` lies, and how many bytes follow it in that span.
std::pair<const std::byte*, size_t> locate(const std::vector<Span>& spans, size_t off) {
  for (const Span& s : spans) {
    if (off < s.bytes) return {s.data + off, s.bytes - off};
    off -= s.bytes;
  }
  return {nullptr, 0};
}

// out = op over the ranks' p[q][0..n-1]. `out` may be p[own] (and nothing
// else): p[own] is combined first, so it is read before it is overwritten;
// the others follow in rank order.
void reduce_into(void* out, const std::vector<const std::byte*>& p, int own, size_t n, DType dt,
                 ReduceOp op) {
  if (n == 0) return;
  const int size = int(p.size());
  std::vector<const std::byte*> order;
  order.push_back(p[size_t(own)]);
  for (int q = 0; q < size; ++q)
    if (q != own) order.push_back(p[size_t(q)]);
  if (op == ReduceOp::kAvg) {
    auto add = kernels::reduce_fn(dt, ReduceOp::kSum);
    auto add_div = kernels::sum_div_fn(dt);
    if (size == 2) return add_div(out, order[0], order[1], n, size);
    add(out, order[0], order[1], n);
    for (int q = 2; q < size - 1; ++q) add(out, out, order[size_t(q)], n);
    return add_div(out, out, order[size_t(size - 1)], n, size);
  }
  auto fn = kernels::reduce_fn(dt, op);
  fn(out, order[0], order[1], n);
  for (int q = 2; q < size; ++q) fn(out, out, order[size_t(q)], n);
}

}  // namespace

// What a rank does in a step; peers compare it with their own.
struct Channel::Desc {
  detail::Signature sig;  // sig.where: the symmetric buffer, if any
  uint64_t step;
};

// Offsets in a rank's control block (kControlBytes).
namespace {
constexpr size_t kWaitersAt = 64, kDescAt = 128;
// A symmetric all-reduce reduces and hands out its share in blocks this big,
// so the copies to the peers read what the reduction just wrote, from cache.
constexpr size_t kBlockBytes = 64 << 10;
}  // namespace

Channel::Channel(World& world, std::byte* base, int lane)
    : world_(world), base_(base), lane_(lane) {
  static_assert(kDescAt + 2 * sizeof(Desc) <= kControlBytes);
}

uint32_t* Channel::counter(int r) const {
  return reinterpret_cast<uint32_t*>(base_ + kControlBytes * size_t(r));
}

uint32_t* Channel::waiters(int r) const {
  return reinterpret_cast<uint32_t*>(base_ + kControlBytes * size_t(r) + kWaitersAt);
}

Channel::Desc* Channel::desc(int r, uint32_t step) const {
  return reinterpret_cast<Desc*>(base_ + kControlBytes * size_t(r) + kDescAt) + (step & 1u);
}

std::byte* Channel::slot(int r, uint32_t step) const {
  const size_t control = (kControlBytes * size_t(world_.size_) + 4095) / 4096 * 4096;
  return base_ + control + (size_t(r) * 2 + (step & 1u)) * world_.chunk_;
}

void Channel::publish(uint32_t phase) {
  uint32_t* c = counter(world_.rank_);
  std::atomic_ref<uint32_t>(*c).store(3 * step_ + phase);
  if (std::atomic_ref<uint32_t>(*waiters(world_.rank_)).load() != 0) futex_wake(c);
}

void Channel::wait_for(int r, uint32_t target, Clock::time_point deadline, const char* what) {
  if (r == world_.rank_) return;
  std::atomic_ref<uint32_t> c(*counter(r));
  for (int i = 0; i < kSpins; ++i) {
    if (reached(c.load(std::memory_order_acquire), target)) return;
    cpu_relax();
  }
  std::atomic_ref<uint32_t> w(*waiters(r));
  const std::string doing = kiln::str(what, " in ", detail::short_name(op_));
  for (;;) {
    if (reached(c.load(std::memory_order_acquire), target)) return;
    try {
      world_.check_peer(r, doing);
    } catch (const TransportError&) {
      if (reached(c.load(), target)) return;  // it got there before it went
      throw;
    }
    const auto now = Clock::now();
    if (now >= deadline) {
      throw TransportError(kiln::str("timed out (the group's timeout) waiting for rank ", r, " to ",
                                     doing, " (peer: rank ", r, ")"));
    }
    w.fetch_add(1);
    const uint32_t v = c.load();
    if (!reached(v, target))
      futex_wait(counter(r), v, std::min<Clock::duration>(deadline - now, kSlice));
    w.fetch_sub(1);
  }
}

void Channel::wait_all(uint32_t target, Clock::time_point deadline, const char* what) {
  for (int r = 0; r < world_.size_; ++r) wait_for(r, target, deadline, what);
}

void Channel::begin_step(const Signature& sig, Clock::time_point deadline, uint64_t where) {
  op_ = sig;
  // Slot and descriptor step%2 were last used in step-2: every rank must be done with it.
  if (step_ >= 2) wait_all(3 * (step_ - 2) + 3, deadline, "finish an earlier step");
  Desc* d = desc(world_.rank_, step_);
  d->sig = sig;
  d->sig.where = where;
  d->step = step_;
}

// Every rank holds the same descriptors, so every rank throws the same message.
void Channel::check_peers_match() const {
  const Signature& mine = desc(world_.rank_, step_)->sig;
  bool agree = true;
  for (int r = 0; r < world_.size_; ++r)
    agree = agree && std::memcmp(&desc(r, step_)->sig, &mine, sizeof mine) == 0;
  if (agree) return;
  std::vector<Signature> all(size_t(world_.size_));
  for (int r = 0; r < world_.size_; ++r) all[size_t(r)] = desc(r, step_)->sig;
  std::string msg = detail::mismatch_message(all);
  if (!msg.empty()) throw detail::MismatchError(msg);
}

std::pair<size_t, size_t> Channel::share(size_t len, size_t elem, int r) const {
  const size_t align = std::max<size_t>(1, 64 / elem);
  const size_t n = size_t(world_.size_);
  const size_t base = len / n / align * align;
  return {base * size_t(r), r + 1 == world_.size_ ? len : base * size_t(r + 1)};
}

void Channel::reduce_chunks(const std::vector<Span>& data, DType dt, ReduceOp op, int root,
                            const Signature& sig, Clock::time_point deadline) {
  const size_t elem = dtype_size(dt);
  size_t total_bytes = 0;
  for (const Span& s : data) total_bytes += s.bytes;
  const size_t total = total_bytes / elem;
  const size_t per_step = world_.chunk_ / elem;
  const int me = world_.rank_;
  if (total == 0) return sync_step(sig, deadline);
  std::vector<const std::byte*> parts(size_t(world_.size_));
  for (size_t off = 0; off < total; off += per_step) {
    const size_t len = std::min(per_step, total - off);
    begin_step(sig, deadline);
    copy_spans<false>(data, off * elem, slot(me, step_), len * elem);
    publish(1);
    wait_all(3 * step_ + 1, deadline, "contribute its input");
    check_peers_match();
    auto [b, e] = share(len, elem, me);
    for (int q = 0; q < world_.size_; ++q) parts[size_t(q)] = slot(q, step_) + b * elem;
    reduce_into(slot(me, step_) + b * elem, parts, me, e - b, dt, op);
    publish(2);
    if (root < 0 || root == me) {
      for (int q = 0; q < world_.size_; ++q) {
        wait_for(q, 3 * step_ + 2, deadline, "reduce its share");
        auto [qb, qe] = share(len, elem, q);
        copy_spans<true>(data, (off + qb) * elem, slot(q, step_) + qb * elem, (qe - qb) * elem);
      }
    }
    publish(3);
    ++step_;
  }
}

void Channel::all_reduce_into(const std::vector<Span>& srcs, Span dst, DType dt, ReduceOp op,
                              const Signature& sig, Clock::time_point deadline) {
  size_t offset = 0;
  if (dst.bytes > 0)
    if (auto buf = world_.find_symmetric(dst.data, dst.bytes, offset))
      return all_reduce_symmetric(*buf, offset, dst.bytes / dtype_size(dt), dt, op, sig, deadline,
                                  srcs);
  copy_spans<false>(srcs, 0, dst.data, dst.bytes);
  all_reduce({dst}, dt, op, sig, deadline);
}

void Channel::all_reduce(const std::vector<Span>& data, DType dt, ReduceOp op, const Signature& sig,
                         Clock::time_point deadline) {
  if (data.size() == 1 && data[0].bytes > 0) {
    size_t offset = 0;
    if (auto buf = world_.find_symmetric(data[0].data, data[0].bytes, offset))
      return all_reduce_symmetric(*buf, offset, data[0].bytes / dtype_size(dt), dt, op, sig,
                                  deadline);
  }
  reduce_chunks(data, dt, op, -1, sig, deadline);
}

// One step, no staging: once every rank's buffer holds its input, rank r
// reduces share r across all buffers (into its own) and copies it into the
// others'; once every rank did, every buffer holds the result. With `srcs`,
// the input is elsewhere: a rank copies into its buffer only the shares the
// others reduce, and reads its own share from srcs (same values, same order of
// operations: the result is the same as copying srcs in first).
void Channel::all_reduce_symmetric(const SymBuffer& buf, size_t offset, size_t n, DType dt,
                                   ReduceOp op, const Signature& sig, Clock::time_point deadline,
                                   const std::vector<Span>& srcs) {
  const size_t elem = dtype_size(dt);
  const int me = world_.rank_;
  begin_step(sig, deadline, ((buf.id + 1) << 40) | offset);
  auto [b, e] = share(n, elem, me);
  if (!srcs.empty()) {
    std::byte* own = buf.bases[size_t(me)] + offset;
    if (b > 0) copy_spans<false>(srcs, 0, own, b * elem);
    if (e < n) copy_spans<false>(srcs, e * elem, own + e * elem, (n - e) * elem);
  }
  publish(1);
  wait_all(3 * step_ + 1, deadline, "contribute its input");
  check_peers_match();
  const size_t block = std::max<size_t>(1, kBlockBytes / elem);
  std::vector<const std::byte*> parts(size_t(world_.size_));
  for (size_t i = b; i < e;) {
    size_t m = std::min(block, e - i);
    const size_t at = offset + i * elem;
    for (int q = 0; q < world_.size_; ++q) parts[size_t(q)] = buf.bases[size_t(q)] + at;
    if (!srcs.empty()) {  // this rank's part straight from its source, up to the span's end
      auto [p, left] = locate(srcs, i * elem);
      KILN_ASSERT(p != nullptr && left >= elem, "sources shorter than the destination");
      parts[size_t(me)] = p;
      m = std::min(m, left / elem);
    }
    std::byte* mine = buf.bases[size_t(me)] + at;
    reduce_into(mine, parts, me, m, dt, op);
    for (int q = 0; q < world_.size_; ++q)
      if (q != me) std::memcpy(buf.bases[size_t(q)] + at, mine, m * elem);
    i += m;
  }
  publish(2);
  wait_all(3 * step_ + 2, deadline, "write its share of the result");
  publish(3);
  ++step_;
}

void Channel::reduce(Span data, DType dt, ReduceOp op, int root, const Signature& sig,
                     Clock::time_point deadline) {
  reduce_chunks({data}, dt, op, root, sig, deadline);
}

// Every rank, the root included, waits until all entered the step and
// compares their descriptors: a rank naming another root is caught on every
// rank (were only the root's descriptor checked, two self-declared roots
// would each keep their own data).
void Channel::broadcast(Span data, int root, const Signature& sig, Clock::time_point deadline) {
  const int me = world_.rank_;
  if (data.bytes == 0) return sync_step(sig, deadline);
  for (size_t off = 0; off < data.bytes; off += world_.chunk_) {
    const size_t len = std::min(world_.chunk_, data.bytes - off);
    begin_step(sig, deadline);
    if (me == root) std::memcpy(slot(me, step_), data.data + off, len);
    publish(1);
    wait_all(3 * step_ + 1, deadline, me == root ? "enter the broadcast" : "send its data");
    check_peers_match();
    if (me != root) std::memcpy(data.data + off, slot(root, step_), len);
    publish(3);
    ++step_;
  }
}

void Channel::all_gather(const std::vector<Span>& outs, Span in, const Signature& sig,
                         Clock::time_point deadline) {
  const int me = world_.rank_;
  if (in.bytes == 0) return sync_step(sig, deadline);
  for (size_t off = 0; off < in.bytes; off += world_.chunk_) {
    const size_t len = std::min(world_.chunk_, in.bytes - off);
    begin_step(sig, deadline);
    std::memcpy(slot(me, step_), in.data + off, len);
    publish(1);
    wait_all(3 * step_ + 1, deadline, "contribute its input");
    check_peers_match();
    for (int q = 0; q < world_.size_; ++q)
      std::memcpy(outs[size_t(q)].data + off, slot(q, step_), len);
    publish(3);
    ++step_;
  }
}

void Channel::reduce_scatter(Span out, Span in, DType dt, ReduceOp op, const Signature& sig,
                             Clock::time_point deadline) {
  const size_t elem = dtype_size(dt);
  const size_t m = out.bytes / elem;  // elements per block
  const size_t n = size_t(world_.size_);
  const size_t per_step = world_.chunk_ / elem / n;  // elements of each block per step
  const int me = world_.rank_;
  if (m == 0) return sync_step(sig, deadline);
  std::vector<const std::byte*> parts(n);
  for (size_t off = 0; off < m; off += per_step) {
    const size_t len = std::min(per_step, m - off);
    begin_step(sig, deadline);
    std::byte* mine = slot(me, step_);
    for (size_t q = 0; q < n; ++q)
      std::memcpy(mine + q * per_step * elem, in.data + (q * m + off) * elem, len * elem);
    publish(1);
    wait_all(3 * step_ + 1, deadline, "contribute its input");
    check_peers_match();
    for (int q = 0; q < world_.size_; ++q)
      parts[size_t(q)] = slot(q, step_) + size_t(me) * per_step * elem;
    reduce_into(out.data + off * elem, parts, me, len, dt, op);
    publish(3);
    ++step_;
  }
}

void Channel::barrier(const Signature& sig, Clock::time_point deadline) {
  sync_step(sig, deadline);
}

// A step that moves no data: a collective of zero elements still checks that
// every rank issued it alike (a peer with data would otherwise wait out the
// timeout).
void Channel::sync_step(const Signature& sig, Clock::time_point deadline) {
  begin_step(sig, deadline);
  publish(1);
  wait_all(3 * step_ + 1, deadline, "enter the barrier");
  check_peers_match();
  publish(3);
  ++step_;
}

}  // namespace kiln::dist::shm
