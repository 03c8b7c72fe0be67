// Umbrella header of kiln::nn (torch.nn): modules, layers, containers, losses,
// init, and nn::functional (torch.nn.functional) re-exporting the composites.
#pragma once

#include "kiln/functional.h"
#include "kiln/nn/activation.h"
#include "kiln/nn/attention.h"
#include "kiln/nn/container.h"
#include "kiln/nn/conv.h"
#include "kiln/nn/embedding.h"
#include "kiln/nn/init.h"
#include "kiln/nn/linear.h"
#include "kiln/nn/loss.h"
#include "kiln/nn/module.h"
#include "kiln/nn/norm.h"
#include "kiln/nn/transformer.h"

/// torch.nn.functional: the stateless ops layers are built from (batch_norm is
/// declared in norm.h, adaptive_avg_pool2d in conv.h).
namespace kiln::nn::functional {
using kiln::avg_pool2d;
using kiln::binary_cross_entropy;
using kiln::binary_cross_entropy_with_logits;
using kiln::conv2d;
using kiln::Conv2dFuncOptions;
using kiln::cosine_similarity;
using kiln::cross_entropy;
using kiln::CrossEntropyOptions;
using kiln::dropout;
using kiln::embedding;
using kiln::gelu;
using kiln::layer_norm;
using kiln::linear;
using kiln::log_softmax;
using kiln::max_pool2d;
using kiln::max_pool2d_with_indices;
using kiln::mse_loss;
using kiln::nll_loss;
using kiln::normalize;
using kiln::one_hot;
using kiln::pad;
using kiln::Pool2dOptions;
using kiln::Reduction;
using kiln::relu;
using kiln::scaled_dot_product_attention;
using kiln::sigmoid;
using kiln::silu;
using kiln::softmax;
using kiln::tanh;
}  // namespace kiln::nn::functional
