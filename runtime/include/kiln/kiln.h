// Umbrella header: everything a user of kiln's eager API needs — tensors,
// ops, autograd, nn, optim, data and checkpoints.
#pragma once

#include "kiln/autograd.h"
#include "kiln/data/data.h"
#include "kiln/dispatch.h"
#include "kiln/functional.h"
#include "kiln/nn/nn.h"
#include "kiln/optim/optim.h"
#include "kiln/random.h"
#include "kiln/serialize.h"
#include "kiln/state_dict.h"
#include "kiln/tensor.h"
#include "kiln/thread_pool.h"
