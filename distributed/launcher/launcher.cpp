// kilnrun's command line, worker environment, exit statuses and line splitting.
// Process supervision is in supervise.cpp.
#include "launcher.h"

#include <signal.h>
#include <sys/wait.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <ostream>

#include "kiln/error.h"
#include "kiln/profiler.h"

namespace kiln::launcher {

namespace {

const char* kFooter = R"(Every worker gets, like torchrun:
  RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK (node rank),
  GROUP_WORLD_SIZE (nnodes), MASTER_ADDR, MASTER_PORT (where node 0's launcher
  hosts the TCP store), KILN_STORE_TOKEN (the job's store token),
  KILN_RESTART_COUNT (restarts so far), KILN_USE_AGENT_STORE=1 (the store is
  kilnrun's: rank 0 connects to it), and OMP_NUM_THREADS=1 and
  KILN_NUM_THREADS=1 when nproc-per-node > 1 and they are unset.
Every output line of a worker is prefixed with "[rank R] ". When a worker exits
non-zero or is killed, every worker on every node is stopped (SIGTERM, then
SIGKILL after the grace period; each worker runs in its own process group, so
its children go too), and kilnrun exits with that first failing worker's code
(128 + signal for a signal). SIGINT/SIGTERM to kilnrun stops the whole job.
Multi-node: run the same command on every node with --nnodes, --node-rank,
--master-addr and --master-port, and the same --token (or KILN_STORE_TOKEN);
a single node generates its token itself.)";

// A number of seconds in [lo, hi] (above lo if `open_low`). CLI11's own
// range checks let nan and inf through, and 1e300 s overflows a deadline.
CLI::Validator seconds_in(double lo, double hi, bool open_low) {
  std::string range = kiln::str(open_low ? "(" : "[", lo, ", ", hi, "]");
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        char* end = nullptr;
        errno = 0;
        double v = text.empty() ? 0 : std::strtod(text.c_str(), &end);
        bool ok = !text.empty() && end && *end == '\0' && errno == 0 && std::isfinite(v) &&
                  (open_low ? v > lo : v >= lo) && v <= hi;
        if (ok) return {};
        return kiln::str("must be a number of seconds in ", range, "; got '", text, "'");
      },
      "SECONDS");
}

}  // namespace

std::optional<int> parse_args(int argc, const char* const* argv, Options& o, std::ostream& out,
                              std::ostream& err) {
  CLI::App app{
      "kilnrun [OPTIONS] program [args...]: launch a distributed kiln job, one\n"
      "worker process per rank (like torchrun)",
      "kilnrun"};
  app.add_option("--nproc-per-node", o.nproc_per_node, "worker processes on this node")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app.add_option("--nnodes", o.nnodes, "number of nodes (one kilnrun per node)")
      ->check(CLI::Range(1, 65536))
      ->capture_default_str();
  app.add_option("--node-rank", o.node_rank, "rank of this node, 0 .. nnodes-1 (0 hosts the store)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--master-addr", o.master_addr, "address of node 0 (the store host)")
      ->capture_default_str();
  app.add_option("--master-port", o.master_port,
                 "port of the store on node 0; 0 picks a free one (single node only)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  app.add_option("--max-restarts", o.max_restarts,
                 "restart the whole group up to this many times after a failure")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--log-dir", o.log_dir, "also write each rank's output to DIR/rank_<r>.log");
  app.add_option("--grace-period", o.grace_seconds,
                 "seconds between SIGTERM and SIGKILL when stopping workers (at most a day)")
      ->check(seconds_in(0, 86400, false))
      ->capture_default_str();
  app.add_option("--rdzv-timeout", o.rdzv_timeout_seconds,
                 "seconds to wait for the store and for every node's launcher (at most a week)")
      ->check(seconds_in(0, 604800, true))
      ->capture_default_str();
  app.add_option("--profile", o.profile_dir,
                 "profile every worker (KILN_PROFILE): DIR/rank<N>.json per rank, merged at the "
                 "end into DIR/trace.json (clocks aligned to rank 0's through the store)");
  app.add_option("--token", o.token,
                 "store token shared by the job's launchers (default: env KILN_STORE_TOKEN)");
  app.footer(kFooter);
  // Everything from the first positional on is the program and its arguments,
  // so `kilnrun -n 2 sh -c '...'` does not parse -c.
  app.prefix_command();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e, out, err);
    return rc;
  }
  o.program = app.remaining();
  if (!o.program.empty() && o.program.front() == "--") o.program.erase(o.program.begin());
  if (o.program.empty()) {
    err << "kilnrun: no program given\n" << app.help();
    return 2;
  }
  if (o.program.front().size() > 1 && o.program.front()[0] == '-') {
    err << "kilnrun: unknown option " << o.program.front() << " (see --help)\n";
    return 2;
  }
  if (o.node_rank >= o.nnodes) {
    err << "kilnrun: --node-rank " << o.node_rank << " must be < --nnodes " << o.nnodes << "\n";
    return 2;
  }
  if (o.master_port == 0 && o.nnodes > 1) {
    err << "kilnrun: --master-port 0 (a free port) works only with --nnodes 1\n";
    return 2;
  }
  return std::nullopt;
}

std::vector<std::string> worker_env(const std::vector<std::string>& base, const Options& o,
                                    int local_rank, int restart_count) {
  std::vector<std::pair<std::string, std::string>> set = {
      {"RANK", std::to_string(o.node_rank * o.nproc_per_node + local_rank)},
      {"LOCAL_RANK", std::to_string(local_rank)},
      {"WORLD_SIZE", std::to_string(o.nnodes * o.nproc_per_node)},
      {"LOCAL_WORLD_SIZE", std::to_string(o.nproc_per_node)},
      {"GROUP_RANK", std::to_string(o.node_rank)},
      {"GROUP_WORLD_SIZE", std::to_string(o.nnodes)},
      {"MASTER_ADDR", o.master_addr},
      {"MASTER_PORT", std::to_string(o.master_port)},
      {"KILN_RESTART_COUNT", std::to_string(restart_count)},
      // The launcher already serves the store on MASTER_PORT: rank 0 must not.
      {"KILN_USE_AGENT_STORE", "1"},
  };
  if (!o.token.empty()) set.emplace_back("KILN_STORE_TOKEN", o.token);
  if (!o.profile_dir.empty()) set.emplace_back("KILN_PROFILE", o.profile_dir + "/rank%r.json");
  auto name_of = [](const std::string& entry) { return entry.substr(0, entry.find('=')); };
  auto has = [&](const std::string& name) {
    for (const auto& e : base)
      if (name_of(e) == name) return true;
    return false;
  };
  // Several workers per node would oversubscribe the cores with one thread
  // per core each (torchrun does the same for OMP_NUM_THREADS).
  if (o.nproc_per_node > 1) {
    for (const char* name : {"OMP_NUM_THREADS", "KILN_NUM_THREADS"})
      if (!has(name)) set.emplace_back(name, "1");
  }
  std::vector<std::string> env;
  for (const auto& e : base) {
    std::string name = name_of(e);
    bool replaced = false;
    for (const auto& kv : set) replaced = replaced || kv.first == name;
    // A stale token from the caller's environment must not leak to a tokenless job.
    if (!replaced && !(name == "KILN_STORE_TOKEN" && o.token.empty())) env.push_back(e);
  }
  for (const auto& [k, v] : set) env.push_back(kiln::str(k, "=", v));
  return env;
}

std::string merge_profile_dir(const std::string& dir) {
  std::vector<std::pair<int, std::string>> ranks;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() <= 9 || !name.starts_with("rank") || !name.ends_with(".json")) continue;
    const std::string digits = name.substr(4, name.size() - 9);
    if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 9) continue;
    ranks.emplace_back(std::stoi(digits), entry.path().string());
  }
  if (ranks.empty()) return "";
  std::sort(ranks.begin(), ranks.end());
  std::vector<std::string> files;
  for (auto& [r, f] : ranks) files.push_back(f);
  const std::string out = (std::filesystem::path(dir) / "trace.json").string();
  profiler::merge_chrome_traces(files, out);
  return out;
}

int exit_code_of_status(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return kiln::str("exited with code ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    const char* abbrev = sigabbrev_np(sig);
    return kiln::str("was killed by signal ", sig, abbrev ? kiln::str(" (SIG", abbrev, ")") : "");
  }
  return kiln::str("ended with wait status ", status);
}

void LineBuffer::feed(std::string_view data, const std::function<void(std::string_view)>& emit) {
  while (!data.empty()) {
    size_t nl = data.find('\n');
    size_t take = nl == std::string_view::npos ? data.size() : nl;
    // Cut over-long lines so memory stays bounded.
    if (buf_.size() + take > max_line_) {
      size_t room = max_line_ - std::min(buf_.size(), max_line_);
      buf_.append(data.substr(0, room));
      emit(buf_);
      buf_.clear();
      data.remove_prefix(room);
      continue;
    }
    buf_.append(data.substr(0, take));
    if (nl == std::string_view::npos) return;
    emit(buf_);
    buf_.clear();
    data.remove_prefix(nl + 1);
  }
}

void LineBuffer::flush(const std::function<void(std::string_view)>& emit) {
  if (!buf_.empty()) emit(buf_);
  buf_.clear();
}

std::string prefixed_line(int rank, std::string_view line) {
  std::string s = kiln::str("[rank ", rank, "] ");
  s.append(line);
  s.push_back('\n');
  return s;
}

}  // namespace kiln::launcher
