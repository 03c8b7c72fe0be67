// The shared-memory transport of the Gloo process group, for groups whose
// ranks all run on one host (private to kiln_distributed).
//
// At group creation every rank publishes a host id (hostname, boot id, pid
// and mount namespaces) and its pid through the store. When all ids agree and
// every rank wants it (KILN_SHM, ProcessGroupOptions::shm), rank 0 creates a
// POSIX shared-memory segment named after the job's store token and the
// group's prefix, the others map it, and rank 0 unlinks it as soon as all have:
// no name is left in /dev/shm, even if a rank crashes later.
//
// Each worker lane of the group owns one Channel: per rank a counter (also the
// futex word), an op descriptor and two chunk-sized slots (double buffering).
// A collective is a sequence of steps, counted per lane alike on every rank
// (lanes run their collectives in the same order everywhere). Each step
// records the collective's signature; every rank compares all of them once
// every rank entered the step, before it reads any peer's data. Within step s a
// rank's counter goes to 3s+1 (its slot holds its input), 3s+2 (its share of
// the reduction is done), 3s+3 (it has read everything it needs of step s);
// it writes slot s%2 again at step s+2 only once every counter reached 3s+3.
// Waits spin briefly, then sleep on the futex in short slices, checking the
// deadline, whether the peer left the group, and whether its process exited.
//
// Symmetric buffers (ProcessGroup::make_comm_buffer) are per-rank segments
// every rank maps; an all-reduce of one needs no slots: a single step in
// which each rank reduces its share across the buffers and writes it into all.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "../collective_signature.h"  // also reached from tests by path
#include "../transport.h"
#include "kiln/distributed/process_group.h"

namespace kiln::dist::shm {

using detail::Span;
using detail::TransportError;

class World;

/// A symmetric allocation: one buffer per rank, every rank's mapped in this
/// process (World::make_symmetric). Unmapped when the last holder lets go.
struct SymBuffer {
  uint64_t id = 0;                // per group, the same on every rank
  size_t bytes = 0;               // of each rank's buffer
  std::vector<std::byte*> bases;  // per rank; bases[rank()] is this rank's own
  ~SymBuffer();
};

/// One lane's share of the segment; used by that lane's worker thread only.
/// Every collective takes the op's signature (detail::Signature): each step
/// records it, and once all ranks entered the step every rank compares all of
/// them, throwing detail::MismatchError naming the ranks that disagree.
class Channel final : public detail::Transport {
 public:
  using Signature = detail::Signature;
  Channel(World& world, std::byte* base, int lane);
  /// Reduces the concatenation of `data` (one dtype) in place on every rank.
  /// A single span inside a symmetric buffer (on every rank alike) is reduced
  /// without staging: each rank reduces its share across the ranks' buffers
  /// and writes it into all of them.
  void all_reduce(const std::vector<Span>& data, DType dt, ReduceOp op, const Signature& sig,
                  Clock::time_point deadline) override;
  /// Reduces the concatenation of `srcs` (only read) into `dst` on every rank.
  /// A dst inside a symmetric buffer is reduced without staging and without a
  /// full copy: each rank copies into its dst only the shares its peers reduce,
  /// and reduces its own share straight from its srcs. A src that is the
  /// matching range of dst itself is not copied.
  void all_reduce_into(const std::vector<Span>& srcs, Span dst, DType dt, ReduceOp op,
                       const Signature& sig, Clock::time_point deadline) override;
  /// As all_reduce, but only `root` receives the result.
  void reduce(Span data, DType dt, ReduceOp op, int root, const Signature& sig,
              Clock::time_point deadline) override;
  /// Copies root's `data` into `data` on every rank.
  void broadcast(Span data, int root, const Signature& sig, Clock::time_point deadline) override;
  /// outs[r] receives rank r's `in`.
  void all_gather(const std::vector<Span>& outs, Span in, const Signature& sig,
                  Clock::time_point deadline) override;
  /// `out` receives the reduction of block rank() of every rank's `in`.
  void reduce_scatter(Span out, Span in, DType dt, ReduceOp op, const Signature& sig,
                      Clock::time_point deadline) override;
  /// Returns once every rank entered it.
  void barrier(const Signature& sig, Clock::time_point deadline) override;

 private:
  struct Desc;
  uint32_t* counter(int r) const;
  uint32_t* waiters(int r) const;
  Desc* desc(int r, uint32_t step) const;
  std::byte* slot(int r, uint32_t step) const;
  // Starts step `step_`: waits until this rank may overwrite its slot, then
  // records what it is doing (checked by the peers).
  void begin_step(const Signature& sig, Clock::time_point deadline, uint64_t where = 0);
  void publish(uint32_t phase);  // phase 1..3 of the current step
  // Wait until rank r's counter (every rank's) reaches `target`.
  void wait_for(int r, uint32_t target, Clock::time_point deadline, const char* what);
  void wait_all(uint32_t target, Clock::time_point deadline, const char* what);
  // Every rank's descriptor of this step equals ours (all reached phase 1).
  void check_peers_match() const;
  // One step without data: only the signatures are compared.
  void sync_step(const Signature& sig, Clock::time_point deadline);
  // Elements [begin, end) of a `len`-element chunk that rank r reduces.
  std::pair<size_t, size_t> share(size_t len, size_t elem, int r) const;
  // The chunked all-reduce core: only `root` (or everyone, root < 0) copies out.
  // srcs (empty: the input is in buf already) cover the n elements at offset.
  void all_reduce_symmetric(const SymBuffer& buf, size_t offset, size_t n, DType dt, ReduceOp op,
                            const Signature& sig, Clock::time_point deadline,
                            const std::vector<Span>& srcs = {});
  void reduce_chunks(const std::vector<Span>& data, DType dt, ReduceOp op, int root,
                     const Signature& sig, Clock::time_point deadline);

  World& world_;
  std::byte* base_;
  int lane_;
  uint32_t step_ = 0;  // steps this lane completed
  Signature op_;       // the collective running (for error messages)
};

/// The segment shared by the ranks of one group, mapped in this rank.
class World {
 public:
  /// Negotiates a segment over `store` (keys under prefix + "/shm/"). Returns
  /// nullptr, on every rank alike, when some rank does not want shared memory,
  /// runs on another host, or cannot create or map the segment (the group
  /// then uses TCP). Store errors and timeouts propagate as kiln::Error.
  static std::unique_ptr<World> connect(Store& store, const std::string& prefix, int rank, int size,
                                        int lanes, bool want, Millis timeout);
  /// Marks this rank as gone (peers waiting for it fail at once) and unmaps.
  ~World();
  World(const World&) = delete;
  World& operator=(const World&) = delete;

  Channel& channel(int lane) { return *channels_[size_t(lane)]; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  size_t chunk_bytes() const { return chunk_; }
  /// Tells the peers this rank will not take part in any further step.
  void mark_left();
  /// Allocates `bytes` (zeroed) per rank in shared memory and maps every rank's
  /// buffer here; collective over `store` (keys under `key`), every rank in the
  /// same order with the same size. nullptr on every rank alike if some rank
  /// cannot allocate or map (the caller then uses plain memory).
  std::shared_ptr<SymBuffer> make_symmetric(Store& store, const std::string& key, size_t bytes,
                                            Millis timeout);
  /// The live symmetric buffer holding this rank's [p, p + bytes), and the
  /// offset of p in it; nullptr if there is none.
  std::shared_ptr<SymBuffer> find_symmetric(const std::byte* p, size_t bytes, size_t& offset) const;

  /// Bytes of one slot (the data one rank contributes per step).
  static constexpr size_t kChunkBytes = size_t(1) << 20;

 private:
  friend class Channel;
  World(int rank, int size, int lanes, std::byte* base, size_t bytes);
  size_t lane_offset(int lane) const;
  uint32_t* left_flag(int r) const;
  // Throws TransportError if rank r left or its process exited.
  void check_peer(int r, const std::string& what) const;

  int rank_, size_, lanes_;
  std::byte* base_;
  size_t bytes_;
  size_t chunk_ = kChunkBytes;
  std::vector<int> pids_;    // per rank
  std::vector<int> pidfds_;  // per rank; -1: same process, or no pidfd support
  std::vector<std::unique_ptr<Channel>> channels_;
  mutable std::mutex sym_mu_;
  uint64_t next_sym_ = 0;
  std::vector<std::weak_ptr<SymBuffer>> syms_;  // live ones; expired entries pruned
};

/// Bytes of one rank's control block in a lane: counter (also the futex word)
/// and waiter count on their own cache lines, then two op descriptors.
inline constexpr size_t kControlBytes = 256;
/// The segment size for `size` ranks and `lanes` lanes.
size_t segment_bytes(int size, int lanes);

}  // namespace kiln::dist::shm
