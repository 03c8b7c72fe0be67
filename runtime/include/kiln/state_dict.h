// StateDict: an ordered name -> tensor map, the unit that modules, optimizers
// and checkpoints exchange (PyTorch's state_dict OrderedDict).
#pragma once

#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kiln/tensor.h"

namespace kiln {

/// Ordered map from names ("fc1.weight", "state.0.exp_avg") to tensors.
/// Keeps insertion order; set() on an existing name replaces its tensor.
/// Lookups and set() are O(1) (a hash index beside the ordered items); erase() is O(n).
class StateDict {
 public:
  using Item = std::pair<std::string, Tensor>;

  /// Adds or replaces an entry.
  void set(const std::string& name, const Tensor& t) {
    auto [it, fresh] = index_.try_emplace(name, items_.size());
    if (!fresh) {
      items_[it->second].second = t;
      return;
    }
    items_.emplace_back(name, t);
  }
  /// True if `name` is present.
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  /// The tensor of `name`; kiln::Error naming the key when absent.
  const Tensor& at(const std::string& name) const {
    const Tensor* t = find(name);
    KILN_CHECK(t != nullptr, "[state_dict] no entry named '", name, "'");
    return *t;
  }
  /// Pointer to the tensor of `name`, or null.
  const Tensor* find(const std::string& name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &items_[it->second].second;
  }
  /// Removes `name` if present; returns whether it was.
  bool erase(const std::string& name) {
    auto it = index_.find(name);
    if (it == index_.end()) return false;
    const size_t at = it->second;
    index_.erase(it);
    items_.erase(items_.begin() + static_cast<std::ptrdiff_t>(at));
    for (size_t i = at; i < items_.size(); ++i) index_[items_[i].first] = i;
    return true;
  }
  /// The names in insertion order.
  std::vector<std::string> keys() const {
    std::vector<std::string> k;
    k.reserve(items_.size());
    for (auto& [n, _] : items_) k.push_back(n);
    return k;
  }
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }
  const std::vector<Item>& items() const { return items_; }

 private:
  std::vector<Item> items_;
  std::unordered_map<std::string, size_t> index_;  // name -> position in items_
};

}  // namespace kiln
