// What the extracted documentation examples may assume (tests/docs): the
// public API with `using namespace kiln`, and the objects the prose around an
// example has set up, as the parameters of the function each example runs in.
#pragma once

#include <functional>
#include <iostream>
#include <memory>

#include "kiln/compile.h"
#include "kiln/kiln.h"

using namespace kiln;

// model: the network; opt: its optimizer; loader: a DataLoader of (x, y)
// batches; step: a training step on a batch (e.g. a compiled one); x, y: one batch.
#define KILN_DOC_PARAMS                                                                            \
  [[maybe_unused]] std::shared_ptr<kiln::nn::Module> model,                                        \
      [[maybe_unused]] kiln::optim::Optimizer &opt,                                                \
      [[maybe_unused]] kiln::data::DataLoader &loader,                                             \
      [[maybe_unused]] const std::function<kiln::Tensor(const kiln::Tensor&, const kiln::Tensor&)> \
          &step, [[maybe_unused]] kiln::Tensor x, [[maybe_unused]] kiln::Tensor y

/// The number of examples extracted (defined in the generated doc_snippets.cpp).
int kiln_doc_snippet_count();
