// Ranks that issue different collectives (sizes, dtypes of the same byte
// count, roots, ops, zero elements on one rank) get a kiln::Error on every
// rank naming each rank and what it issued, over TCP and over shared memory
// alike, and the group is unusable afterwards. Before the signature check,
// TCP aborted the process (Gloo's enforce on mismatched sizes) or reduced
// garbage, and shared memory let two self-declared broadcast roots keep their
// own data. Ranks run in a forked child (an abort must not kill the suite).
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "distributed/child_ranks.h"
#include "kiln/distributed/process_group.h"
#include "kiln/functional.h"

namespace kiln::dist {
namespace {

using kiln::testing::ranks_in_child;

// What a rank saw: the error of its collective (or "no error: <values>"),
// then the error of a barrier issued afterwards.
std::string outcome(ProcessGroup& pg, const std::function<Tensor()>& run) {
  std::string s;
  try {
    Tensor t = run();
    s = "no error: max " + std::to_string(t.numel() ? t.max().item<double>() : 0.0);
  } catch (const Error& e) {
    s = e.what();
  }
  try {
    pg.barrier()->wait();
    s += " | barrier ok";
  } catch (const Error& e) {
    s += std::string(" | ") + e.what();
  }
  return s;
}

// Every rank's message contains each of `parts`, and the later barrier failed
// because the group is unusable.
void expect_all(const std::vector<std::string>& got, size_t ranks,
                const std::vector<std::string>& parts, const std::string& what) {
  ASSERT_EQ(got.size(), ranks) << what << ": " << (got.empty() ? "" : got[0]);
  for (size_t r = 0; r < got.size(); ++r) {
    for (const auto& p : parts)
      EXPECT_NE(got[r].find(p), std::string::npos) << what << ", rank " << r << ":\n"
                                                   << got[r] << "\nlacks: " << p;
    EXPECT_NE(got[r].find("unusable after an earlier failure"), std::string::npos)
        << what << ", rank " << r << ": " << got[r];
  }
}

const char* transport(int shm) {
  return shm ? "shm" : "tcp";
}

// Different element counts: over TCP Gloo aborted the process.
TEST(CollectiveMismatch, DifferentSizesFailOnEveryRank) {
  for (int shm : {0, 1}) {
    auto got = ranks_in_child(2, shm, [](int rank, ProcessGroup& pg) {
      return outcome(pg, [&] {
        Tensor t = zeros({rank == 0 ? 100 : 200});
        pg.all_reduce(t)->wait();
        return t;
      });
    });
    expect_all(got, 2,
               {"[all_reduce] all_reduce #0", "ranks issued different collectives",
                "rank 0 issued all_reduce #0 (f32, 100 elements, sum) but rank 1 issued "
                "all_reduce #0 (f32, 200 elements, sum)"},
               transport(shm));
  }
}

// f32[200] and f64[100] have the same bytes: every collective that moves them
// was silently wrong over TCP (and broadcast/all_gather over shm too).
TEST(CollectiveMismatch, SameBytesDifferentDtypesFailOnEveryRank) {
  using Op = std::function<void(ProcessGroup&, Tensor&)>;
  const std::vector<std::pair<std::string, Op>> ops = {
      {"all_reduce", [](ProcessGroup& pg, Tensor& t) { pg.all_reduce(t)->wait(); }},
      {"broadcast", [](ProcessGroup& pg, Tensor& t) { pg.broadcast(t, 0)->wait(); }},
      {"reduce", [](ProcessGroup& pg, Tensor& t) { pg.reduce(t, 1)->wait(); }},
      {"all_gather",
       [](ProcessGroup& pg, Tensor& t) {
         pg.all_gather({zeros_like(t), zeros_like(t)}, t)->wait();
       }},
      {"reduce_scatter",
       [](ProcessGroup& pg, Tensor& t) {
         Tensor out = empty({t.numel() / 2}, t.dtype());
         pg.reduce_scatter(out, t)->wait();
       }},
  };
  for (int shm : {0, 1}) {
    for (const auto& [name, op] : ops) {
      auto got = ranks_in_child(2, shm, [&, op = op](int rank, ProcessGroup& pg) {
        return outcome(pg, [&] {
          Tensor t = rank == 0 ? ones({200}) : ones({100}, DType::f64);
          op(pg, t);
          return t;
        });
      });
      expect_all(got, 2,
                 {"ranks issued different collectives", "rank 0 issued " + name + " #0 (f32, 200",
                  "rank 1 issued " + name + " #0 (f64, 100"},
                 name + " over " + transport(shm));
    }
  }
}

// Two ranks that each name themselves the root: over shm both kept their own
// data and returned success. Three ranks over TCP: the message groups ranks.
TEST(CollectiveMismatch, BroadcastRootsMustAgree) {
  for (int shm : {0, 1}) {
    auto got = ranks_in_child(2, shm, [](int rank, ProcessGroup& pg) {
      return outcome(pg, [&] {
        Tensor t = full({8}, double(rank + 1));
        pg.broadcast(t, rank)->wait();
        return t;
      });
    });
    expect_all(got, 2,
               {"[broadcast] broadcast #0", "rank 0 issued broadcast #0 (f32, 8 elements, root=0)",
                "but rank 1 issued broadcast #0 (f32, 8 elements, root=1)"},
               transport(shm));
  }
  for (int shm : {0, 1}) {
    auto got = ranks_in_child(3, shm, [](int rank, ProcessGroup& pg) {
      return outcome(pg, [&] {
        Tensor t = full({8}, double(rank + 1));
        pg.broadcast(t, rank == 1 ? 1 : 0)->wait();
        return t;
      });
    });
    expect_all(got, 3,
               {"ranks 0, 2 issued broadcast #0 (f32, 8 elements, root=0) but rank 1 issued "
                "broadcast #0 (f32, 8 elements, root=1)"},
               kiln::str("3 ranks over ", transport(shm)));
  }
}

// Zero elements on one rank and some on the other: an error at once naming
// both, where the rank with data used to wait out the timeout.
TEST(CollectiveMismatch, ZeroElementsOnOneRankIsAMismatch) {
  for (int shm : {0, 1}) {
    auto got = ranks_in_child(2, shm, [](int rank, ProcessGroup& pg) {
      return outcome(pg, [&] {
        Tensor t = ones({rank == 0 ? 0 : 4});
        pg.all_reduce(t, ReduceOp::kMax)->wait();
        return t;
      });
    });
    expect_all(got, 2,
               {"rank 0 issued all_reduce #0 (f32, 0 elements, max) but rank 1 issued "
                "all_reduce #0 (f32, 4 elements, max)"},
               transport(shm));
  }
}

// Ranks that agree still get the right results (including zero elements),
// over both transports, and the group stays usable.
TEST(CollectiveMismatch, AgreeingRanksAreUnaffected) {
  for (int shm : {0, 1}) {
    auto got = ranks_in_child(3, shm, [](int rank, ProcessGroup& pg) {
      Tensor empty_t = zeros({0});
      pg.all_reduce(empty_t)->wait();
      pg.broadcast(empty_t, 2)->wait();
      Tensor t = full({5}, double(rank));
      pg.broadcast(t, 2)->wait();
      pg.all_reduce(t)->wait();
      return outcome(pg, [&] { return t; });
    });
    ASSERT_EQ(got.size(), 3u) << got[0];
    for (const auto& s : got) EXPECT_EQ(s, "no error: max 6.000000 | barrier ok") << shm;
  }
}

}  // namespace
}  // namespace kiln::dist
