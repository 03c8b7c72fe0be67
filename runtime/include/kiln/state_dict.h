// StateDict: an ordered name -> tensor map, the unit that modules, optimizers
// and checkpoints exchange (PyTorch's state_dict OrderedDict).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "kiln/tensor.h"

namespace kiln {

/// Ordered map from names ("fc1.weight", "state.0.exp_avg") to tensors.
/// Keeps insertion order; set() on an existing name replaces its tensor.
class StateDict {
 public:
  using Item = std::pair<std::string, Tensor>;

  /// Adds or replaces an entry.
  void set(const std::string& name, const Tensor& t) {
    for (auto& [k, v] : items_)
      if (k == name) {
        v = t;
        return;
      }
    items_.emplace_back(name, t);
  }
  /// True if `name` is present.
  bool contains(const std::string& name) const { return find(name) != nullptr; }
  /// The tensor of `name`; kiln::Error naming the key when absent.
  const Tensor& at(const std::string& name) const {
    const Tensor* t = find(name);
    KILN_CHECK(t != nullptr, "[state_dict] no entry named '", name, "'");
    return *t;
  }
  /// Pointer to the tensor of `name`, or null.
  const Tensor* find(const std::string& name) const {
    for (auto& [k, v] : items_)
      if (k == name) return &v;
    return nullptr;
  }
  /// Removes `name` if present; returns whether it was.
  bool erase(const std::string& name) {
    for (auto it = items_.begin(); it != items_.end(); ++it)
      if (it->first == name) {
        items_.erase(it);
        return true;
      }
    return false;
  }
  std::vector<std::string> keys() const {
    std::vector<std::string> k;
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
};

}  // namespace kiln
