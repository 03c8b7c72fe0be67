#include "kiln/executor.h"

#include <unordered_map>

#include "kiln/autograd.h"
#include "kiln/dispatch.h"

namespace kiln {

struct Executor::Step {
  const ir::Node* node = nullptr;
  std::vector<int> in;
  std::vector<int> out;
  std::vector<int> free_after;  // slots whose last use is this step
};

Executor::~Executor() = default;
Executor::Executor(Executor&&) noexcept = default;

Executor::Executor(std::shared_ptr<const ir::Graph> graph) : graph_(std::move(graph)) {
  const ir::Graph& g = *graph_;
  std::unordered_map<const ir::Value*, int> slot;
  for (const ir::Value* v : g.inputs()) slot[v] = num_slots_++;
  const auto nodes = g.nodes();
  steps_.resize(nodes.size());
  for (size_t s = 0; s < nodes.size(); ++s) {
    Step& st = steps_[s];
    st.node = nodes[s];
    for (const ir::Value* v : nodes[s]->inputs) {
      auto it = slot.find(v);
      KILN_ASSERT(it != slot.end(), "executor: node ", s, " uses an undefined value");
      st.in.push_back(it->second);
    }
    for (const ir::Value* v : nodes[s]->outputs) {
      slot[v] = num_slots_;
      st.out.push_back(num_slots_++);
    }
  }
  // Last use of every slot; graph outputs live to the end.
  std::vector<int> last(static_cast<size_t>(num_slots_), -1);
  for (size_t s = 0; s < steps_.size(); ++s)
    for (int i : steps_[s].in) last[static_cast<size_t>(i)] = static_cast<int>(s);
  std::vector<bool> is_out(static_cast<size_t>(num_slots_), false);
  for (const ir::Value* v : g.outputs()) {
    output_slots_.push_back(slot.at(v));
    is_out[static_cast<size_t>(slot.at(v))] = true;
  }
  for (int sl = 0; sl < num_slots_; ++sl) {
    const int l = last[static_cast<size_t>(sl)];
    if (l >= 0 && !is_out[static_cast<size_t>(sl)])
      steps_[static_cast<size_t>(l)].free_after.push_back(sl);
  }
  // Where each output becomes available: 0 = before the first step, s+1 = after step s.
  outputs_at_step_.resize(steps_.size() + 1);
  std::unordered_map<int, size_t> made_at;
  for (size_t s = 0; s < steps_.size(); ++s)
    for (int o : steps_[s].out) made_at[o] = s + 1;
  for (size_t i = 0; i < output_slots_.size(); ++i) {
    auto it = made_at.find(output_slots_[i]);
    outputs_at_step_[it == made_at.end() ? 0 : it->second].push_back(i);
  }
  // Symbols are bound by the first input dim that is exactly the symbol.
  sym_source_.assign(static_cast<size_t>(g.num_syms), {-1, -1});
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    const auto& shape = g.inputs()[i]->shape;
    for (size_t d = 0; d < shape.size(); ++d) {
      const ir::SymInt& x = shape[d];
      if (!x.is_static() && x.a == 1 && x.b == 0 &&
          sym_source_[static_cast<size_t>(x.sym)].first < 0)
        sym_source_[static_cast<size_t>(x.sym)] = {static_cast<int>(i), static_cast<int>(d)};
    }
  }
}

std::vector<int64_t> Executor::bind_symbols(std::span<const Tensor> inputs) const {
  std::vector<int64_t> syms(sym_source_.size());
  for (size_t k = 0; k < sym_source_.size(); ++k) {
    auto [i, d] = sym_source_[k];
    KILN_ASSERT(i >= 0, "executor: symbol s", k, " is bound by no input and was not given");
    KILN_CHECK(static_cast<size_t>(i) < inputs.size() && d < inputs[static_cast<size_t>(i)].dim(),
               "[executor] input ", i, " does not have the dim that binds symbol s", k);
    syms[k] = inputs[static_cast<size_t>(i)].size(d);
  }
  return syms;
}

int Executor::producer_of_output(size_t i) const {
  for (size_t s = 0; s < outputs_at_step_.size(); ++s)
    for (size_t o : outputs_at_step_[s])
      if (o == i) return static_cast<int>(s) - 1;
  return -1;
}

std::vector<Tensor> Executor::run(const RunArgs& args) const {
  const ir::Graph& g = *graph_;
  KILN_CHECK(args.inputs.size() == g.inputs().size(), "[executor] the graph takes ",
             g.inputs().size(), " inputs, got ", args.inputs.size());
  const std::vector<int64_t> syms = args.syms.empty()
                                        ? bind_symbols(args.inputs)
                                        : std::vector<int64_t>(args.syms.begin(), args.syms.end());
  std::vector<Tensor> slots(static_cast<size_t>(num_slots_));
  for (size_t i = 0; i < args.inputs.size(); ++i) {
    const ir::Value* v = g.inputs()[i];
    const Tensor& t = args.inputs[i];
    KILN_CHECK(t.defined() && !t.is_symbolic(), "[executor] input ", i, " (", v->name,
               ") is undefined or symbolic");
    const Dims want = ir::eval_shape(v->shape, syms);
    KILN_CHECK(t.dtype() == v->dtype && t.shape() == want, "[executor] input ", i, " (", v->name,
               ") is ", t.dtype(), t.shape(), ", the graph expects ", v->dtype, want);
    slots[i] = t;
  }
  NoGradGuard no_grad;
  UntracedGuard untraced;
  auto fire = [&](size_t at) {
    if (!args.on_ready) return;
    for (size_t o : outputs_at_step_[at])
      (*args.on_ready)(o, slots[static_cast<size_t>(output_slots_[o])]);
  };
  // Bytes of intermediate buffers alive (counted once per storage).
  std::unordered_map<const StorageImpl*, int> live;
  int64_t cur = 0, peak = 0;
  auto hold = [&](const Tensor& t) {
    if (!args.stats || !t.impl()->storage) return;
    if (live[t.impl()->storage.get()]++ == 0)
      cur += static_cast<int64_t>(t.impl()->storage->nbytes);
  };
  auto drop = [&](const Tensor& t) {
    if (!args.stats || !t.defined() || !t.impl()->storage) return;
    auto it = live.find(t.impl()->storage.get());
    if (it != live.end() && --it->second == 0) {
      cur -= static_cast<int64_t>(t.impl()->storage->nbytes);
      live.erase(it);
    }
  };
  fire(0);
  std::vector<Tensor> ins;
  for (size_t s = 0; s < steps_.size(); ++s) {
    const Step& st = steps_[s];
    const ir::Node& n = *st.node;
    if (n.is_constant() && !n.sym_attrs.empty()) {
      // A number that depends on a dynamic size (mean's count).
      const ir::SymAttr& sa = n.sym_attrs.front();
      const double e = static_cast<double>(sa.expr.eval(syms));
      const double v = sa.reciprocal ? 1.0 / e : e;
      Tensor c = scalar_tensor(Scalar(v), n.constant.dtype());
      c.impl()->wrapped_number = n.constant.impl()->wrapped_number;
      slots[static_cast<size_t>(st.out[0])] = c;
    } else if (n.is_constant()) {
      slots[static_cast<size_t>(st.out[0])] = n.constant;
    } else {
      ins.clear();
      for (int i : st.in) ins.push_back(slots[static_cast<size_t>(i)]);
      Attrs attrs = n.sym_attrs.empty() ? n.attrs : n.eval_attrs(syms);
      if (n.info().has(kRandom) && !n.attrs.has("fixed_seed")) {
        attrs.set("seed", AttrValue(static_cast<int64_t>(args.rng_seed)))
            .set("offset", AttrValue(static_cast<int64_t>(args.rng_base) + n.attrs.i("offset")));
      }
      std::vector<Tensor> outs = dispatch(n.op, ins, attrs);
      for (size_t k = 0; k < outs.size(); ++k) {
        hold(outs[k]);
        slots[static_cast<size_t>(st.out[k])] = std::move(outs[k]);
      }
    }
    peak = std::max(peak, cur);
    for (int f : st.free_after) {
      drop(slots[static_cast<size_t>(f)]);
      slots[static_cast<size_t>(f)] = Tensor();
    }
    fire(s + 1);
  }
  if (args.stats) {
    args.stats->peak_bytes = peak;
    args.stats->nodes_run = static_cast<int64_t>(steps_.size());
  }
  std::vector<Tensor> result;
  result.reserve(output_slots_.size());
  for (int o : output_slots_) result.push_back(slots[static_cast<size_t>(o)]);
  return result;
}

}  // namespace kiln
