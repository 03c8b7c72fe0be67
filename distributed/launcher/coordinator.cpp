// kilnrun's coordination of the launchers of a multi-node job through the store.
#include "coordinator.h"

#include <cstdio>
#include <thread>

#include "kiln/error.h"

namespace kiln::launcher::detail {

namespace {

using namespace std::chrono_literals;

constexpr auto kAckWait = 3s;          // node 0 waits this long for the others to
                                       // read the outcome before closing the store
constexpr auto kStoreOpTimeout = 10s;  // every store round trip of the launcher
constexpr auto kNodeSilence = 10s;     // node 0 declares a launcher lost after this
constexpr auto kBeatCheck = 1s;        // how often node 0 checks the heartbeats

std::string encode(const Failure& f) {
  return kiln::str(f.code, " ", f.restartable ? 1 : 0, " ", f.what);
}

Failure decode(const std::string& s) {
  Failure f;
  int r = 1, consumed = 0;
  if (std::sscanf(s.c_str(), "%d %d %n", &f.code, &r, &consumed) < 2) {
    f.what = kiln::str("unreadable failure record '", s, "'");
    f.restartable = false;
    return f;
  }
  f.restartable = r != 0;
  f.what = s.substr(static_cast<size_t>(consumed));
  return f;
}

dist::Bytes bytes(const std::string& s) {
  return dist::Bytes(s.begin(), s.end());
}
std::string text(const dist::Bytes& b) {
  return std::string(b.begin(), b.end());
}

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

std::string key(int r, const std::string& what) {
  return kiln::str("kilnrun/", r, "/", what);
}

}  // namespace

Coordinator::Coordinator(const Options& o) : o_(o) {
  auto deadline = Clock::now() + seconds(o.rdzv_timeout_seconds);
  std::string last_error;
  while (!store_) {
    if (g_stop_signal) return;
    if (Clock::now() >= deadline)
      throw kiln::Error(kiln::str("cannot reach the store at ", o.master_addr, ":", o.master_port,
                                  " within --rdzv-timeout: ", last_error));
    try {
      dist::TCPStoreOptions so;
      so.host = o.master_addr;
      so.port = static_cast<uint16_t>(o.master_port);
      so.token = o.token;
      so.timeout = 1000ms;  // retried here, so a signal is seen within a second
      store_ = std::make_unique<dist::TCPStore>(so);
    } catch (const std::exception& e) {
      last_error = e.what();
      wait_signal_pipe(100ms);
    }
  }
  store_->set_timeout(std::chrono::duration_cast<dist::Millis>(kStoreOpTimeout));
}

std::optional<Failure> Coordinator::rendezvous(int r) {
  if (r == 0 && o_.node_rank == 0) store_->set("kilnrun/config", bytes(config()));
  store_->add(key(r, "joined"), 1);
  auto deadline = Clock::now() + seconds(o_.rdzv_timeout_seconds);
  while (store_->add(key(r, "joined"), 0) < o_.nnodes) {
    if (auto f = poll_failure(r)) return f;
    if (g_stop_signal) return std::nullopt;
    if (Clock::now() >= deadline)
      throw kiln::Error(kiln::str("only ", store_->add(key(r, "joined"), 0), " of ", o_.nnodes,
                                  " nodes joined within --rdzv-timeout"));
    wait_signal_pipe(kStorePoll);
  }
  if (r == 0 && o_.node_rank != 0) {
    std::string theirs = text(store_->get("kilnrun/config"));
    KILN_CHECK(theirs == config(), "node 0 runs with ", theirs, " but this node with ", config(),
               "; every node needs the same --nnodes, --nproc-per-node and --max-restarts");
  }
  return std::nullopt;
}

Failure Coordinator::publish_failure(int r, const Failure& f) {
  std::string mine = encode(f);
  std::string now = text(store_->compare_set(key(r, "failed"), {}, bytes(mine)));
  store_->add(key(r, "nfailed"), 1);
  return now == mine ? f : decode(now);
}

std::optional<Failure> Coordinator::poll_failure(int r) {
  if (store_->add(key(r, "nfailed"), 0) == 0) return std::nullopt;
  return decode(text(store_->get(key(r, "failed"))));
}

void Coordinator::publish_done(int r) {
  store_->add(key(r, "done"), 1);
}

bool Coordinator::all_done(int r) {
  return store_->add(key(r, "done"), 0) >= o_.nnodes;
}

void Coordinator::beat(int r) {
  store_->add(key(r, kiln::str("beat/", o_.node_rank)), 1);
}

std::optional<Failure> Coordinator::check_beats(int r) {
  auto now = Clock::now();
  if (beats_.empty()) beats_.assign(static_cast<size_t>(o_.nnodes), {-1, now});
  if (now < next_beat_check_) return std::nullopt;
  next_beat_check_ = now + kBeatCheck;
  for (int n = 1; n < o_.nnodes; ++n) {
    auto& [last, since] = beats_[static_cast<size_t>(n)];
    int64_t v = store_->add(key(r, kiln::str("beat/", n)), 0);
    if (v != last) {
      last = v;
      since = now;
    } else if (now - since > kNodeSilence) {
      auto secs = std::chrono::duration_cast<std::chrono::seconds>(kNodeSilence).count();
      return Failure{1, false,
                     kiln::str("the launcher of node ", n, " stopped responding (no heartbeat for ",
                               secs, " s)")};
    }
  }
  return std::nullopt;
}

void Coordinator::finish(int r) {
  if (lost_) return;
  try {
    if (o_.node_rank != 0) {
      store_->add(key(r, "ack"), 1);
      return;
    }
    auto deadline = Clock::now() + kAckWait;
    int64_t others = store_->add(key(r, "joined"), 0) - 1;  // only nodes that joined answer
    while (store_->add(key(r, "ack"), 0) < others && Clock::now() < deadline)
      std::this_thread::sleep_for(20ms);
  } catch (const std::exception&) {
    // Finishing is best effort: the outcome is already decided.
  }
}

std::string Coordinator::config() const {
  return kiln::str("nnodes=", o_.nnodes, " nproc-per-node=", o_.nproc_per_node,
                   " max-restarts=", o_.max_restarts);
}

}  // namespace kiln::launcher::detail
