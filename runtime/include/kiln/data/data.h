// Umbrella header of kiln::data (torch.utils.data): datasets, samplers, the
// DataLoader, the IDX reader, Fashion-MNIST and the progress bar.
#pragma once

#include "kiln/data/dataloader.h"
#include "kiln/data/dataset.h"
#include "kiln/data/fashion_mnist.h"
#include "kiln/data/idx.h"
#include "kiln/data/progress.h"
#include "kiln/data/sampler.h"
