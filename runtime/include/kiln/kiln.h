// Umbrella header: everything a user of kiln's eager API needs.
#pragma once

#include "kiln/autograd.h"
#include "kiln/dispatch.h"
#include "kiln/functional.h"
#include "kiln/random.h"
#include "kiln/tensor.h"
#include "kiln/thread_pool.h"
