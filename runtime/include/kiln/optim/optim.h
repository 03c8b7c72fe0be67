// Umbrella header of kiln::optim: optimizers, LR schedulers, gradient clipping.
#pragma once

#include "kiln/optim/adam.h"
#include "kiln/optim/clip_grad.h"
#include "kiln/optim/lr_scheduler.h"
#include "kiln/optim/optimizer.h"
#include "kiln/optim/rmsprop.h"
#include "kiln/optim/sgd.h"
