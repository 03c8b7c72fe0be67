// Lets Gloo's rendezvous (connectFullMesh) use kiln's Store: set/get/wait
// under a key prefix, so several contexts and groups share one store. Store
// errors (kiln::Error, e.g. a wait timing out) propagate through Gloo.
#pragma once

#include <gloo/rendezvous/store.h>

#include <memory>
#include <string>
#include <vector>

#include "kiln/distributed/store.h"

namespace kiln::dist::gloo_backend {

class GlooStore final : public ::gloo::rendezvous::Store {
 public:
  GlooStore(std::shared_ptr<kiln::dist::Store> store, std::string prefix)
      : store_(std::move(store)), prefix_(std::move(prefix)) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    store_->set(prefix_ + key, Bytes(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    Bytes b = store_->get(prefix_ + key);
    return std::vector<char>(b.begin(), b.end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, store_->timeout()); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    std::vector<std::string> full;
    full.reserve(keys.size());
    for (const auto& k : keys) full.push_back(prefix_ + k);
    store_->wait(full, timeout);
  }

 private:
  std::shared_ptr<kiln::dist::Store> store_;
  std::string prefix_;
};

}  // namespace kiln::dist::gloo_backend
