// The default process group: init_process_group (env:// and tcp://), new_group,
// destroy_process_group; and the ReduceOp names. Backends live elsewhere
// (src/gloo/, or gloo_stub/ when kiln is built without Gloo).
#include "kiln/distributed/process_group.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "kiln/autograd.h"
#include "kiln/env.h"
#include "kiln/error.h"
#include "kiln/functional.h"
#include "process_group_impl.h"
#include "profiler_clock.h"

namespace kiln::dist {

const char* to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kProduct:
      return "product";
  }
  return "unknown";
}

WorkPtr ProcessGroup::all_reduce_into(std::vector<Tensor> srcs, Tensor dst, ReduceOp op) {
  detail::check_all_reduce_into(srcs, dst);
  NoGradGuard ng;
  int64_t off = 0;
  for (const Tensor& s : srcs) {
    Tensor part = dst.narrow(0, off, s.numel());
    if (s.data_ptr() != part.data_ptr()) part.copy_(s.reshape({s.numel()}));
    off += s.numel();
  }
  return all_reduce(std::move(dst), op);
}

#ifndef KILN_HAVE_NCCL_BACKEND
std::shared_ptr<ProcessGroup> make_nccl_group(std::shared_ptr<Store>, int, int, int,
                                              ProcessGroupOptions, const std::string&) {
  throw Error(
      "[nccl] kiln was built without the NCCL backend (it needs the CUDA toolkit's nccl.h and "
      "libnccl, and Gloo for the emulated NCCL's shared memory)");
}
#endif

Tensor ProcessGroup::make_comm_buffer(int64_t numel, DType dtype) {
  KILN_CHECK(numel >= 0, "[make_comm_buffer] numel must be >= 0; got ", numel);
  return zeros({numel}, dtype);
}

namespace {

constexpr const char* kInit = "[init_process_group] ";

// Where the store is and who this rank is, resolved from InitOptions + env.
struct Rendezvous {
  std::string host;
  int port = 0;
  int rank = -1;
  int world_size = -1;
  int local_rank = 0;
};

std::string env_value(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

// A whole decimal integer in [lo, hi]; kiln::Error naming `what` otherwise.
long parse_int(const std::string& what, const std::string& text, long lo, long hi) {
  char* end = nullptr;
  errno = 0;
  long v = text.empty() ? 0 : std::strtol(text.c_str(), &end, 10);
  bool ok = !text.empty() && end && *end == '\0' && errno == 0;
  KILN_CHECK(ok, kInit, what, "='", text, "' is not an integer");
  KILN_CHECK(v >= lo && v <= hi, kInit, what, "=", v, " is out of range [", lo, ", ", hi, "]");
  return v;
}

// "host:port" or "[v6]:port" (tcp:// URLs).
void parse_host_port(const std::string& url, const std::string& hp, Rendezvous& r) {
  std::string host, port;
  if (!hp.empty() && hp[0] == '[') {
    auto close = hp.find(']');
    KILN_CHECK(close != std::string::npos && close + 1 < hp.size() && hp[close + 1] == ':', kInit,
               "malformed init_method '", url, "': expected tcp://[ipv6]:port");
    host = hp.substr(1, close - 1);
    port = hp.substr(close + 2);
  } else {
    auto colon = hp.rfind(':');
    KILN_CHECK(colon != std::string::npos, kInit, "malformed init_method '", url,
               "': expected tcp://host:port (no port given)");
    host = hp.substr(0, colon);
    port = hp.substr(colon + 1);
  }
  KILN_CHECK(!host.empty(), kInit, "malformed init_method '", url, "': the host is empty");
  KILN_CHECK(host.find_first_of("/?#@ ") == std::string::npos, kInit, "malformed init_method '",
             url, "': bad host '", host, "'");
  bool digits = !port.empty() && port.size() <= 5 &&
                port.find_first_not_of("0123456789") == std::string::npos;
  long p = digits ? std::stol(port) : 0;
  KILN_CHECK(p >= 1 && p <= 65535, kInit, "malformed init_method '", url, "': port '", port,
             "' is not an integer in [1, 65535]");
  r.host = host;
  r.port = int(p);
}

Rendezvous resolve(const InitOptions& o) {
  Rendezvous r;
  const std::string& url = o.init_method;
  bool is_env = url == "env://";
  bool is_tcp = url.rfind("tcp://", 0) == 0;
  KILN_CHECK(is_env || is_tcp, kInit, "unsupported init_method '", url,
             "' (use env:// or tcp://host:port)");
  std::vector<std::string> missing;
  auto need = [&](const char* name) {
    std::string v = env_value(name);
    if (v.empty()) missing.push_back(name);
    return v;
  };
  std::string rank = o.rank >= 0 ? std::to_string(o.rank) : need("RANK");
  std::string world = o.world_size >= 0 ? std::to_string(o.world_size) : need("WORLD_SIZE");
  std::string addr, port;
  if (is_env) {
    addr = need("MASTER_ADDR");
    port = need("MASTER_PORT");
  }
  KILN_CHECK(missing.empty(), kInit, url, " needs the environment variable(s) ", missing,
             is_env ? "" : " (or InitOptions::rank / world_size)", ", which are not set");
  if (is_env) {
    r.host = addr;
    r.port = int(parse_int("MASTER_PORT", port, 1, 65535));
  } else {
    parse_host_port(url, url.substr(6), r);
  }
  r.world_size = int(parse_int("WORLD_SIZE", world, 1, 1 << 20));
  r.rank = int(parse_int("RANK", rank, 0, r.world_size - 1));
  if (std::string lr = env_value("LOCAL_RANK"); !lr.empty())
    r.local_rank = int(parse_int("LOCAL_RANK", lr, 0, 1 << 20));
  return r;
}

// A group of `backend`; LOCAL_RANK picks the CUDA device of nccl and auto.
std::shared_ptr<ProcessGroup> make_group(const std::string& backend, std::shared_ptr<Store> store,
                                         int rank, int size, int local_rank,
                                         const ProcessGroupOptions& po, const std::string& prefix) {
  if (backend == "nccl") return make_nccl_group(store, rank, size, local_rank, po, prefix);
  if (backend == "auto") return make_auto_group(store, rank, size, local_rank, po, prefix);
  return make_gloo_group(store, rank, size, po, prefix);
}

bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

struct DefaultGroup {
  std::mutex mu;
  std::shared_ptr<ProcessGroup> group;
  std::shared_ptr<Store> store;
  std::unique_ptr<TCPStoreServer> server;
  ProcessGroupOptions options;
  std::string prefix;
  std::string backend;  // of the default group; new_group uses it too
  int local_rank = 0;
  int inits = 0;       // init_process_group calls in this process (fresh store keys)
  int new_groups = 0;  // new_group calls since init (every rank counts alike)
};

DefaultGroup& state() {
  static DefaultGroup s;
  return s;
}

std::shared_ptr<ProcessGroup> current(const char* op) {
  auto& s = state();
  std::lock_guard lock(s.mu);
  KILN_CHECK(s.group != nullptr, "[", op, "] the default process group is not initialized ",
             "(call kiln::dist::init_process_group first)");
  return s.group;
}

}  // namespace

void init_process_group(const InitOptions& opts) {
  auto& s = state();
  std::lock_guard lock(s.mu);
  KILN_CHECK(s.group == nullptr, kInit, "already initialized (call destroy_process_group first)");
  KILN_CHECK(opts.backend == "gloo" || opts.backend == "nccl" || opts.backend == "auto", kInit,
             "unknown backend '", opts.backend, "' (use gloo, nccl or auto)");
  KILN_CHECK(opts.timeout.count() > 0, kInit, "timeout must be positive; got ",
             opts.timeout.count(), " ms");
  Rendezvous r = resolve(opts);
  const bool agent_store = env::get_flag("KILN_USE_AGENT_STORE", false);
  const std::string token = env::get("KILN_STORE_TOKEN");
  const bool loopback = is_loopback(r.host);
  // Keys of a launcher-hosted store outlive a restart or a re-init: fresh prefix.
  std::string prefix =
      kiln::str("pg/r", env::get("KILN_RESTART_COUNT", "0"), "/i", s.inits++, "/default");
  try {
    if (r.rank == 0 && !agent_store) {
      TCPStoreServerOptions so;
      so.host = loopback ? "127.0.0.1" : "0.0.0.0";
      so.port = uint16_t(r.port);
      so.token = token;
      try {
        s.server = std::make_unique<TCPStoreServer>(so);
      } catch (const Error& e) {
        kiln::throw_error(
            kiln::str(kInit, "rank 0 cannot serve the store on port ", r.port, ": ", e.what()));
      }
    }
    TCPStoreOptions co;
    co.host = r.host;
    co.port = uint16_t(r.port);
    co.token = token;
    co.timeout = opts.timeout;
    s.store = std::make_shared<TCPStore>(co);
    ProcessGroupOptions po;
    po.timeout = opts.timeout;
    po.threads = opts.threads;
    if (loopback && env_value("GLOO_SOCKET_IFNAME").empty()) po.host = "127.0.0.1";
    s.group = make_group(opts.backend, s.store, r.rank, r.world_size, r.local_rank, po, prefix);
    s.options = po;
    detail::align_profiler_clock(*s.store, prefix, r.rank, r.world_size);
  } catch (...) {
    s.group.reset();
    s.store.reset();
    s.server.reset();
    throw;
  }
  s.prefix = prefix;
  s.backend = opts.backend;
  s.local_rank = r.local_rank;
  s.new_groups = 0;
}

bool is_initialized() {
  auto& s = state();
  std::lock_guard lock(s.mu);
  return s.group != nullptr;
}

std::shared_ptr<ProcessGroup> default_group() {
  return current("default_group");
}

int get_rank() {
  return current("get_rank")->rank();
}

int get_world_size() {
  return current("get_world_size")->size();
}

int get_local_rank() {
  current("get_local_rank");
  auto& s = state();
  std::lock_guard lock(s.mu);
  return s.local_rank;
}

std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks) {
  auto& s = state();
  std::shared_ptr<Store> store;
  ProcessGroupOptions options;
  std::string prefix, backend;
  int rank = 0, world = 0, local_rank = 0;
  {
    std::lock_guard lock(s.mu);
    KILN_CHECK(s.group != nullptr, "[new_group] the default process group is not initialized ",
               "(call kiln::dist::init_process_group first)");
    rank = s.group->rank();
    world = s.group->size();
    KILN_CHECK(!ranks.empty(), "[new_group] the list of ranks is empty");
    std::vector<int> sorted = ranks;
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 0; i < sorted.size(); ++i) {
      KILN_CHECK(sorted[i] >= 0 && sorted[i] < world, "[new_group] rank ", sorted[i],
                 " is out of range for world size ", world, " (ranks ", ranks, ")");
      KILN_CHECK(i == 0 || sorted[i] != sorted[i - 1], "[new_group] rank ", sorted[i],
                 " is listed twice (ranks ", ranks, ")");
    }
    store = s.store;
    options = s.options;
    backend = s.backend;
    local_rank = s.local_rank;
    prefix = kiln::str(s.prefix, "/group", s.new_groups++);
  }
  std::vector<int> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  auto it = std::find(sorted.begin(), sorted.end(), rank);
  if (it == sorted.end()) return nullptr;
  return make_group(backend, store, int(it - sorted.begin()), int(sorted.size()), local_rank,
                    options, prefix);
}

void destroy_process_group() {
  auto& s = state();
  std::lock_guard lock(s.mu);
  s.group.reset();  // joins its workers before the store goes away
  s.store.reset();
  s.server.reset();
  s.new_groups = 0;
}

}  // namespace kiln::dist
