// Containers: Sequential (chains forward) and ModuleList (holds modules).
#pragma once

#include <initializer_list>
#include <memory>
#include <type_traits>
#include <utility>

#include "kiln/nn/module.h"

namespace kiln::nn {

/// Shared code of the index-addressed containers: children named "0", "1", ...
class ModuleSequence : public Module {
 public:
  /// Appends `m` under the next index; returns it.
  template <typename M>
  std::shared_ptr<M> push_back(std::shared_ptr<M> m) {
    append(std::to_string(items_.size()), m);
    return m;
  }
  /// Appends `m` under an explicit name (PyTorch's OrderedDict form).
  template <typename M>
  std::shared_ptr<M> push_back(const std::string& name, std::shared_ptr<M> m) {
    append(name, m);
    return m;
  }
  /// Element i (negative counts from the end); kiln::Error when out of range.
  std::shared_ptr<Module> operator[](int64_t i) const;
  /// Element i cast to M; kiln::Error when it is not an M.
  template <typename M>
  std::shared_ptr<M> at(int64_t i) const {
    auto m = std::dynamic_pointer_cast<M>((*this)[i]);
    KILN_CHECK(m != nullptr, "[", name(), "] element ", i, " is a ", (*this)[i]->name(),
               ", not the requested type");
    return m;
  }
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }

 protected:
  void append(const std::string& name, std::shared_ptr<Module> m);
  /// Clones every element into `dst` (same names), then copies the mode.
  void clone_into(ModuleSequence& dst) const;

 private:
  std::vector<std::shared_ptr<Module>> items_;
  std::vector<std::string> names_;
};

/// Calls its modules in order, each on the previous one's output.
class Sequential : public ModuleSequence {
 public:
  Sequential() = default;
  Sequential(std::initializer_list<std::shared_ptr<Module>> modules);
  /// The modules as arguments, as libtorch's Sequential(Linear(4, 8), ReLU()):
  /// std::make_shared<Sequential>(std::make_shared<Linear>(4, 8), ...).
  template <typename... Ms>
  requires(sizeof...(Ms) > 0 && (std::is_base_of_v<Module, Ms> &&
                                 ...)) explicit Sequential(std::shared_ptr<Ms>... modules)
      : Sequential({std::shared_ptr<Module>(std::move(modules))...}) {}
  /// Modules with explicit names, in order.
  explicit Sequential(const NamedModules& modules);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<Module> clone() const override;
};

/// A list of modules registered as children "0", "1", ... (no forward).
class ModuleList : public ModuleSequence {
 public:
  ModuleList() = default;
  ModuleList(std::initializer_list<std::shared_ptr<Module>> modules);
  /// The modules as arguments (make_shared<ModuleList>(block1, block2)).
  template <typename... Ms>
  requires(sizeof...(Ms) > 0 && (std::is_base_of_v<Module, Ms> &&
                                 ...)) explicit ModuleList(std::shared_ptr<Ms>... modules)
      : ModuleList({std::shared_ptr<Module>(std::move(modules))...}) {}
  std::shared_ptr<Module> clone() const override;
};

}  // namespace kiln::nn
