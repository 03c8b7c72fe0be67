// The tracer: implements the runtime's Recorder so that running ordinary kiln
// code on symbolic tensors builds an ir::Graph, and remembers how the graph's
// inputs and outputs bind to the program's state (captured tensors, .grad,
// host scalars, the random generator).
#pragma once

#include <functional>
#include <memory>
#include <source_location>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/dispatch.h"
#include "kiln/ir/graph.h"

namespace kiln::ir {

/// Thrown (instead of a plain Error) for a value-dependent read when the caller
/// asked for eager fallback; compile() catches it.
struct TraceFallback : Error {
  using Error::Error;
};

/// Where a graph input comes from at each call.
struct InputBinding {
  enum Kind : uint8_t {
    kArg,      ///< tensor argument `index`
    kCapture,  ///< captured tensor `index`
    kHost,     ///< host scalar `index`
    kGradOut,  ///< gradient w.r.t. result `index` (traced backward of a forward)
  } kind = kArg;
  int index = 0;
};

/// A tensor from the enclosing scope, read by reference at each call.
struct Capture {
  std::weak_ptr<TensorImpl> tensor;  ///< expired ⇒ the capture was replaced: re-trace
  DType dtype = DType::f32;
  Dims shape;
  bool requires_grad = false;
  bool grad_defined = false;  ///< whether its .grad was defined when tracing started
};

/// What happens with a graph output after a run.
struct OutputBinding {
  enum Kind : uint8_t {
    kResult,    ///< result number `index` of the function
    kWrite,     ///< copied into capture `index` (in-place update of state)
    kGrad,      ///< becomes capture `index`'s .grad (in place when shapes allow)
    kGradIn,    ///< gradient w.r.t. differentiable input `index` (traced backward)
    kArgGrad,   ///< becomes argument `index`'s .grad (backward inside the function)
    kEscaped,   ///< the value of TraceResult::escaped[index], which becomes real
    kArgWrite,  ///< copied into argument `index` (the function updated it in place)
  } kind = kResult;
  int index = 0;
};

/// Everything a trace produced.
struct TraceResult {
  std::unique_ptr<Graph> graph;
  std::vector<InputBinding> inputs;                   ///< one per graph input
  std::vector<OutputBinding> outputs;                 ///< one per graph output
  std::vector<std::shared_ptr<TensorImpl>> captured;  ///< strong refs, index = capture number
  std::vector<Capture> captures;
  std::vector<std::function<double()>> hosts;  ///< host scalars in trace order
  std::vector<int> cleared_grads;              ///< captures whose .grad ends undefined
  /// Tensors made during the trace that something outside it still holds
  /// (state the traced call created: an optimizer's buffers on its first step).
  /// A replay would not recreate them; the first run makes them real instead.
  std::vector<std::weak_ptr<TensorImpl>> escaped;
  std::vector<std::function<std::string()>> guards;  ///< "" while each holds
  bool uses_rng = false;
  /// Per result: 0 computed, 1 the argument/captured tensor itself, 2 a
  /// detached alias of one (so a result the optimizer reduced to an input is copied).
  std::vector<uint8_t> result_is_input;
};

/// Records kiln ops into a Graph while installed as the thread's recorder.
class Tracer : public Recorder {
 public:
  /// `fallback`: value reads throw TraceFallback instead of Error.
  explicit Tracer(bool fallback = false);
  ~Tracer() override;

  /// Adds function argument `index` as a graph input; returns its symbolic stand-in.
  Tensor add_arg(const Tensor& real, int index);
  /// Resolves the function's results to graph values now (capturing returned
  /// state), so they count among the differentiable inputs.
  void note_results(const std::vector<Tensor>& results);
  /// Adds a graph input standing for the gradient of result `index` (shaped like it).
  Tensor add_grad_output(const Tensor& result, int index);
  /// Ends the trace: `results` are the function's flattened outputs, `grads`
  /// (optional) traced gradients w.r.t. differentiable inputs (undefined =
  /// unused). Adds the outputs for mutated state, restores the program state
  /// the trace touched (.grad fields, version counters, the generator).
  TraceResult finish(const std::vector<Tensor>& results, const std::vector<Tensor>& grads = {});
  /// True if the traced code replaced or accumulated into some .grad (it ran backward).
  bool grads_changed() const;
  /// Captured tensor `k` seen so far (for the driver's differentiable inputs).
  const std::vector<std::shared_ptr<TensorImpl>>& captured() const;
  /// Abandons the trace, restoring the program state it touched.
  void abort();

  // Recorder
  std::vector<Tensor> record(OpId op, std::span<const Tensor> inputs, const Attrs& attrs,
                             const std::vector<TensorMeta>& out) override;
  void on_value_read(const char* what, const std::source_location& where) override;
  void on_inplace(const Tensor& target, const Tensor& value) override;
  void on_grad_change(const Tensor& t) override;
  Tensor on_detach(const Tensor& t) override;
  Tensor host_scalar(const std::function<double()>& fn) override;
  void add_guard(std::function<std::string()> check) override;
  void host_action(const std::function<void()>& fn) override;

 private:
  struct State;
  Value* value_of(const Tensor& t, const char* op, size_t slot);
  Tensor make_symbolic(Value* v, const TensorMeta& m);
  int capture(const Tensor& t);
  void restore();

  std::unique_ptr<State> st_;
};

}  // namespace kiln::ir
