// Internal: the executor's schedule entries, shared by executor.cpp (running)
// and executor_schedule.cpp (building the schedule).
#pragma once

#include <memory>
#include <vector>

#include "executor/executor.h"
#include "kernels/device_kernels.h"
#include "kernels/kernel_cache.h"
#include "kernels/lower.h"

namespace kiln {

struct Executor::Group {
  detail::LoweredGroup lowered;
  std::shared_ptr<const kir::LoadedKernel> kernel;            // on the CPU
  std::shared_ptr<const detail::DeviceKernel> device_kernel;  // on another device
  size_t kernel_id = 0;                                       // equal ids: the same compiled kernel
  std::vector<detail::Slot> arg_slot;                         // per kernel argument
  int nodes = 0;
  // A static graph's run-time sizes and work items, made once (kernel_sizes).
  std::vector<int64_t> static_sizes;
  int64_t static_items = 0;
};

struct Executor::Step {
  const ir::Node* node = nullptr;  // an unfused node, or
  std::vector<size_t> groups;      // fused kernels launched together
  std::vector<detail::Slot> in;
  std::vector<detail::Slot> out;
  std::vector<detail::Slot> free_after;      // slots whose last use is this step
  std::vector<detail::Slot> overwritable;    // dying slots one kernel here may write in place
  std::vector<detail::Slot> dying_inputs;    // graph-input slots read last here, by one instance
  int place = -1;                            // a matmul: its placement (placements_), if any
  detail::Slot host_slot = detail::kNoSlot;  // a matmul with a placement: the host's output slot
  // A matmul run with its epilogue group (gemm_epilogue.h): `in` ends with the
  // bias, `out` is the group's output; relu after the bias when set.
  bool gemm_epilogue = false, gemm_relu = false;
  // A constant node: its value where the plan runs (a table the function made
  // on the host and moved to the device is a host constant in the IR).
  Tensor constant;
};

// Each value's slot, by value id (unique within a graph): a vector lookup, no
// hashing (see assign_slots).
class Executor::SlotByValue {
 public:
  explicit SlotByValue(std::vector<detail::Slot> by_id) : by_id_(std::move(by_id)) {}
  detail::Slot operator()(const ir::Value* v) const { return by_id_[static_cast<size_t>(v->id())]; }

 private:
  std::vector<detail::Slot> by_id_;
};

// Where run() may write outputs straight into RunArgs::dests, by slot.
struct Executor::Destinations {
  // Graph-input slot -> the destination it holds, when no other input shares
  // its storage and no unfused view of it escapes as an output (written by
  // the kernel that reads that input last, after every reader of its views).
  detail::SlotVec<const Tensor*> input;
  // Output slot -> a destination no input shares (a .grad the graph does not
  // read) and no other destination overlaps, for a value that is nothing but
  // that destination (not also a result or saved value).
  detail::SlotVec<const Tensor*> free;
};

}  // namespace kiln
