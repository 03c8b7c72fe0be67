// Tests of passes/src/schedule_collectives.cpp.
#include "kiln/passes/schedule_collectives.h"

#include "passes/pass_test_util.h"

namespace kiln::passes {
namespace {

using testing::expect_pass;
using testing::expect_unchanged;

TEST(ScheduleCollectives, StartsEarlyWaitsBeforeFirstUse) {
  // The start of %1's all-reduce moves up to right after %1; its wait moves
  // down to just before the update that reads it, past unrelated work.
  expect_pass(schedule_collectives, R"(
graph(%0: f32[4] "arg0", %1: f32[4] "arg1") {
  %2 = exp(%0) : f32[4]
  %3 = neg(%2) : f32[4]
  %4 = collective_start(%2) {group=1, reduce_op=1} : i64[]
  %5 = collective_wait(%4, %2) {group=1} : f32[4]
  %6 = tanh(%3) : f32[4]
  %7 = add(%5, %1) : f32[4]
  return %7 "out0", %6 "out1"
}
)",
              R"(
graph(%0: f32[4] "arg0", %1: f32[4] "arg1") {
  %2 = exp(%0) : f32[4]
  %3 = collective_start(%2) {group=1, reduce_op=1} : i64[]
  %4 = neg(%2) : f32[4]
  %5 = tanh(%4) : f32[4]
  %6 = collective_wait(%3, %2) {group=1} : f32[4]
  %7 = add(%6, %1) : f32[4]
  return %7 "out0", %5 "out1"
}
)",
              true);
}

TEST(ScheduleCollectives, WaitOnlyUsedByOutputsGoesLast) {
  // Two buckets: each wait read only by graph outputs (gradients written back)
  // ends up after all computation; the waits keep their relative order.
  expect_pass(schedule_collectives, R"(
graph(%0: f32[4] "arg0") {
  %1 = collective_start(%0) {group=1, reduce_op=0} : i64[]
  %2 = collective_wait(%1, %0) {group=1} : f32[4]
  %3 = exp(%0) : f32[4]
  %4 = collective_start(%3) {group=1, reduce_op=0} : i64[]
  %5 = collective_wait(%4, %3) {group=1} : f32[4]
  %6 = neg(%3) : f32[4]
  return %2 "g0", %5 "g1", %6 "out"
}
)",
              R"(
graph(%0: f32[4] "arg0") {
  %1 = collective_start(%0) {group=1, reduce_op=0} : i64[]
  %2 = exp(%0) : f32[4]
  %3 = collective_start(%2) {group=1, reduce_op=0} : i64[]
  %4 = neg(%2) : f32[4]
  %5 = collective_wait(%1, %0) {group=1} : f32[4]
  %6 = collective_wait(%3, %2) {group=1} : f32[4]
  return %5 "g0", %6 "g1", %4 "out"
}
)",
              true);
}

TEST(ScheduleCollectives, AlreadyScheduledIsUnchanged) {
  expect_unchanged(schedule_collectives, R"(
graph(%0: f32[4] "arg0") {
  %1 = collective_start(%0) {group=0, reduce_op=0} : i64[]
  %2 = exp(%0) : f32[4]
  %3 = collective_wait(%1, %0) {group=0} : f32[4]
  %4 = add(%3, %2) : f32[4]
  return %4 "out"
}
)");
}

}  // namespace
}  // namespace kiln::passes
