// Sequential and ModuleList.
#include "kiln/nn/container.h"

namespace kiln::nn {

void ModuleSequence::append(const std::string& name, std::shared_ptr<Module> m) {
  register_module(name, m);
  items_.push_back(std::move(m));
  names_.push_back(name);
}

std::shared_ptr<Module> ModuleSequence::operator[](int64_t i) const {
  const int64_t n = static_cast<int64_t>(items_.size());
  KILN_CHECK(i >= -n && i < n, "[", name(), "] index ", i, " is out of range for ", n, " modules");
  return items_[static_cast<size_t>(i < 0 ? i + n : i)];
}

void ModuleSequence::clone_into(ModuleSequence& dst) const {
  // Mode first, while dst is empty: the clones then keep their own modes.
  dst.train(is_training());
  for (size_t i = 0; i < items_.size(); ++i) dst.append(names_[i], items_[i]->clone());
  dst.copy_ties_from(*this);  // weights tied across elements stay tied
}

Sequential::Sequential(std::initializer_list<std::shared_ptr<Module>> modules) {
  for (const auto& m : modules) push_back(m);
}

Sequential::Sequential(const NamedModules& modules) {
  for (const auto& [n, m] : modules) push_back(n, m);
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  for (const auto& m : *this) y = m->forward(y);
  return y;
}

std::shared_ptr<Module> Sequential::clone() const {
  auto m = std::make_shared<Sequential>();
  clone_into(*m);
  return m;
}

ModuleList::ModuleList(std::initializer_list<std::shared_ptr<Module>> modules) {
  for (const auto& m : modules) push_back(m);
}

std::shared_ptr<Module> ModuleList::clone() const {
  auto m = std::make_shared<ModuleList>();
  clone_into(*m);
  return m;
}

}  // namespace kiln::nn
