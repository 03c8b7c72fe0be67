// Rematerialization after a budget's cuts (rules 9 to 11 of remat.cpp): the
// copies the cuts made that cost more than they need. Rule 9 merges copies two
// cuts made of one value; rule 11 lets a copy whose forward value another cut
// keeps read that value; rule 10 spends what slack the budget leaves on reading
// recomputed matmuls' forward values again.
#include <algorithm>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "cse_key.h"
#include "kiln/error.h"
#include "kiln/passes/dce.h"
#include "remat_internal.h"

namespace kiln::passes::detail {
namespace {

using ir::Node;
using ir::Value;

// ---- rule 9: a value two cuts recompute is computed once ----

// CSE's key of a copy without its cut id, each input read as the value `as`
// maps it to (what it stands for), so copies and originals compare.
KeyOptions copy_key(const std::unordered_map<const Value*, Value*>& as) {
  KeyOptions opt;
  opt.skip_attr = "recompute";
  opt.input = [&as](const Value* v) -> const Value* {
    auto it = as.find(v);
    return it == as.end() ? v : it->second;
  };
  return opt;
}

bool is_copy(const Node* n) {
  return n->attrs.has("recompute") && n->attrs.i("recompute") < 0;
}

// Copies of later cuts that compute what an earlier copy already does (a
// matmul a second cut recomputes from the same saved value, bench/remat_bench's
// MLP at 50%: 3 of 14), as units: each opaque duplicate and the duplicates it
// reads, joined where one reads another; every pair is (duplicate, the earlier
// value it becomes). Elementwise duplicates alone stay: they fuse into their
// readers' kernels, and one computation would be stored longer instead.
std::vector<std::vector<std::pair<Node*, Value*>>> duplicate_units(const ir::Graph& g) {
  // CSE's key without the cut id, each input read as what it stands for
  // after the merges before it: copies with one key compute the same value.
  std::unordered_map<const Value*, Value*> rep;
  const KeyOptions opt = copy_key(rep);
  std::unordered_map<std::string, Node*> first;  // key -> the earliest copy
  std::string key;
  KeyScratch scratch;
  std::vector<Node*> dups;
  for (Node* n : g.nodes()) {
    if (!is_copy(n) || n->outputs.size() != 1 || n->inputs.empty()) continue;
    if (!make_key(n, key, scratch, opt)) continue;
    auto [it, fresh] = first.emplace(key, n);
    if (fresh) continue;
    rep[n->output()] = it->second->output();
    dups.push_back(n);
  }
  // Kept: opaque duplicates and the duplicates they read (latest first), in
  // units joined by data edges (union-find over dups).
  std::unordered_map<const Node*, size_t> index;
  for (size_t k = 0; k < dups.size(); ++k) index[dups[k]] = k;
  std::vector<char> keep(dups.size(), 0);
  std::vector<size_t> parent(dups.size());
  for (size_t k = 0; k < dups.size(); ++k) parent[k] = k;
  auto find = [&](size_t k) {
    while (parent[k] != k) k = parent[k] = parent[parent[k]];
    return k;
  };
  for (size_t k = dups.size(); k-- > 0;) {
    const Node* n = dups[k];
    keep[k] = keep[k] || n->info().has(kOpaque);
    if (!keep[k]) continue;
    for (const Value* u : n->inputs) {
      auto it = u->producer ? index.find(u->producer) : index.end();
      if (it == index.end()) continue;
      keep[it->second] = 1;
      parent[find(it->second)] = find(k);
    }
  }
  std::vector<std::vector<std::pair<Node*, Value*>>> units;
  std::unordered_map<size_t, size_t> unit_of;  // root -> unit, in order of first member
  for (size_t k = 0; k < dups.size(); ++k) {
    if (!keep[k]) continue;
    auto [it, fresh] = unit_of.emplace(find(k), units.size());
    if (fresh) units.emplace_back();
    units[it->second].emplace_back(dups[k], rep.at(dups[k]->output()));
  }
  return units;
}

// Rule 9: merges the units `accept` agrees to, all at once if it does, else one
// at a time (each tried on a clone of g, kept by moving it into g).
template <typename Accept>
bool merge_duplicates(ir::Graph& g, std::vector<std::string>& log, Accept accept) {
  auto merge = [](ir::Graph& c, const std::vector<std::pair<Node*, Value*>>& unit) {
    for (const auto& [dup, keep] : unit) c.replace_all_uses(dup->output(), keep);
    for (auto it = unit.rbegin(); it != unit.rend(); ++it) c.erase(it->first);
    dce(c);
  };
  int merged = 0;
  for (size_t skip = 0, all = 1;; all = 0) {
    std::unique_ptr<ir::Graph> c = g.clone();
    const auto units = duplicate_units(*c);
    if (units.size() <= skip) break;
    size_t n = 0;
    for (size_t k = all ? 0 : skip; k < (all ? units.size() : skip + 1); ++k, ++n)
      merge(*c, units[k]);
    if (accept(*c)) {
      g = std::move(*c);
      merged += static_cast<int>(n);
      if (all) break;
    } else if (!all) {
      ++skip;
    }
  }
  if (merged > 0)
    log.push_back(str("remat: ", merged, " matmul chain(s) two cuts recomputed now run once"));
  return merged > 0;
}

// ---- rule 10: slack under a met budget keeps recomputed matmuls ----

// Which copies recomputed_originals lists.
enum class Copies {
  kOpaque,  ///< recomputed matmuls and convolutions (rule 10), costliest first
  kKept,    ///< other copies whose forward value a cut keeps anyway (rule 11), largest first
};

// Each recomputed copy of `which` kind and the forward value it stands for
// (CSE's key without the cut id, copies' inputs read as their originals).
// Values a checkpoint region of the user's recomputes are left alone. A
// forward value is kept anyway if it is a result, a copy reads it (a cut
// saved it) or a node after the copy does.
std::vector<std::pair<Node*, Value*>> recomputed_originals(const ir::Graph& g, Copies which) {
  std::unordered_map<const Value*, Value*> orig;
  const KeyOptions opt = copy_key(orig);
  std::unordered_map<std::string, Node*> forward;
  std::unordered_set<std::string> checkpointed;
  std::string key;
  KeyScratch scratch;
  std::vector<std::pair<Node*, Value*>> out;
  std::unordered_set<const Value*> results(g.outputs().begin(), g.outputs().end());
  auto kept = [&](const Node* copy, const Value* v) {
    return results.count(v) || std::any_of(v->users.begin(), v->users.end(), [&](const Node* u) {
             return is_copy(u) || g.position(u) > g.position(copy);
           });
  };
  for (Node* n : g.nodes()) {
    if (n->outputs.size() != 1 || n->inputs.empty() || !make_key(n, key, scratch, opt)) continue;
    if (!is_copy(n)) {
      if (n->attrs.has("recompute")) checkpointed.insert(key);
      forward.emplace(key, n);
      continue;
    }
    auto it = forward.find(key);
    if (it == forward.end()) continue;
    Value* v = it->second->output();
    orig[n->output()] = v;
    if (checkpointed.count(key) || n->info().has(kOpaque) != (which == Copies::kOpaque)) continue;
    if (which == Copies::kOpaque || kept(n, v)) out.emplace_back(n, v);
  }
  auto weight = [which](const Node* n) {
    return which == Copies::kOpaque ? recompute_cost(*n)
                                    : static_cast<double>(elems_of(n->output()));
  };
  std::stable_sort(out.begin(), out.end(),
                   [&](const auto& a, const auto& b) { return weight(a.first) > weight(b.first); });
  return out;
}

// Rules 10 and 11: each copy of `which` kind reads its forward value instead
// (the copy and the chain only it read go) while `accept` agrees.
template <typename Accept>
int read_originals(ir::Graph& g, Copies which, Accept accept) {
  int kept = 0;
  for (size_t skip = 0;;) {
    std::unique_ptr<ir::Graph> c = g.clone();
    const auto cands = recomputed_originals(*c, which);
    if (cands.size() <= skip) break;
    const auto [copy, original] = cands[skip];
    c->replace_all_uses(copy->output(), original);
    c->erase(copy);
    dce(*c);
    if (accept(*c)) {
      g = std::move(*c);
      ++kept;
    } else {
      ++skip;
    }
  }
  return kept;
}

}  // namespace

bool after_budget_cuts(ir::Graph& g, std::vector<std::string>& log,
                       const std::function<int64_t(const ir::Graph&)>& node_peak,
                       const std::function<int64_t(const ir::Graph&)>& fused_peak,
                       int64_t start_peak, int64_t budget) {
  const int64_t fused = fused_peak(g);
  bool changed = merge_duplicates(g, log, [&](const ir::Graph& c) {
    return node_peak(c) <= start_peak && fused_peak(c) <= std::max(budget, fused);
  });
  int64_t now = changed ? fused_peak(g) : fused;
  // Rules 11 and 10 in turn: a matmul rule 10 keeps may leave a copy reading
  // a value that another cut saves, and what rule 11 frees rule 10 may spend.
  int read = 0, kept = 0;
  for (int round = 0;; ++round) {
    // Rule 11: no growth of either peak (the node-order one within the graph's own).
    const int r = read_originals(g, Copies::kKept, [&](const ir::Graph& c) {
      const int64_t f = fused_peak(c);
      if (f > now || node_peak(c) > start_peak) return false;
      now = f;
      return true;
    });
    read += r;
    // Rule 10 again only for what rule 11 freed (each trial plans fusion).
    if (round > 0 && r == 0) break;
    // Within the budget, or, unmet, within the floor reached.
    const int64_t limit = std::max(budget, now);
    const int k = read_originals(g, Copies::kOpaque, [&](const ir::Graph& c) {
      const int64_t f = fused_peak(c);
      if (f > limit) return false;
      now = f;
      return true;
    });
    kept += k;
    if (k == 0) break;
  }
  if (read > 0)
    log.push_back(str("remat: ", read, " copies read the forward value another cut keeps"));
  if (kept > 0)
    log.push_back(str("remat: ", kept, " recomputed matmul(s) kept instead, within the ",
                      now > budget ? "floor reached" : "budget"));
  changed |= read + kept > 0;
  return changed;
}

}  // namespace kiln::passes::detail
