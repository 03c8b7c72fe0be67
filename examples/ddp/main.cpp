// Data-parallel training of the Fashion-MNIST models (examples/fashion_mnist)
// with DistributedDataParallel, one process per rank:
//
//   kilnrun --nproc-per-node 2 ddp_fashion_mnist [--model mlp|cnn] [--epochs N]
//       [--steps N] [--batch-size N] [--lr X] [--limit N] [--test-limit N]
//       [--root DIR] [--seed N] [--compile] [--log-every N] [--device cpu|cuda]
//
// Each rank reads its share of the training set through a DistributedSampler
// (reshuffled every epoch) and trains a replica of the model; DDP averages the
// gradients, overlapping the all-reduce with backward. --compile runs forward
// and backward through kiln::compile (the optimizer step stays eager). Rank 0
// prints progress and the test accuracy after each epoch. --device cuda
// trains on CUDA device LOCAL_RANK over the "nccl" backend (on the emulated
// device every rank shares its one device, and the emulated NCCL runs the
// collectives); the default is the CPU over "gloo".
#include <chrono>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <string>

#include "example_main.h"
#include "fashion_mnist.h"
#include "kiln/compile.h"
#include "kiln/cuda.h"
#include "kiln/data/data.h"
#include "kiln/distributed/ddp.h"
#include "kiln/distributed/sampler.h"
#include "kiln/kiln.h"
#include "kiln/optim/optim.h"

namespace {

using namespace kiln;

struct Options {
  std::string model = "mlp";
  int epochs = 1;
  int64_t steps = 0;        // per epoch; 0 = the whole share
  int64_t batch_size = 64;  // per rank
  double lr = 1e-3;
  int64_t limit = 0;  // training images (0 = all)
  int64_t test_limit = 2000;
  std::string root;
  uint64_t seed = 0;
  bool compile = false;
  int64_t log_every = 50;
  Device device = Device::cpu();  // its type only: each rank's index is its LOCAL_RANK
};

const char* kUsage =
    "usage: ddp_fashion_mnist [--model mlp|cnn] [--epochs N] [--steps N] [--batch-size N] "
    "[--lr X] [--limit N] [--test-limit N] [--root DIR] [--seed N] [--compile] "
    "[--log-every N] [--device cpu|cuda]\n(run under kilnrun --nproc-per-node N)\n";

std::shared_ptr<data::Dataset> first_n(std::shared_ptr<data::Dataset> ds, int64_t n) {
  if (n <= 0 || n >= ds->size()) return ds;
  std::vector<int64_t> idx(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) idx[static_cast<size_t>(i)] = i;
  return std::make_shared<data::Subset>(ds, idx);
}

double accuracy(nn::Module& model, const std::shared_ptr<data::Dataset>& test, Device device) {
  NoGradGuard ng;
  model.eval();
  data::DataLoader loader(test, {.batch_size = 500});
  int64_t correct = 0, total = 0;
  for (auto& b : loader) {
    correct += sum(eq(argmax(model(b[0].to(device)), 1), b[1].to(device))).item<int64_t>();
    total += b[1].numel();
  }
  model.train();
  return total ? static_cast<double>(correct) / static_cast<double>(total) : 0.0;
}

int run(const Options& o) {
  dist::init_process_group({.backend = o.device.is_cuda() ? "nccl" : "gloo"});
  const int rank = dist::get_rank(), world = dist::get_world_size();
  auto pg = dist::default_group();
  // The NCCL group's device: cuda:LOCAL_RANK (it refused to start when that
  // does not exist), or the emulated device's one, which every rank shares.
  const Device device =
      o.device.is_cuda() ? Device::cuda(dist::get_local_rank() % cuda::device_count()) : o.device;

  auto norm = [&](bool train) {
    return std::make_shared<data::FashionMNIST>(
        data::FashionMNISTOptions{.root = o.root, .train = train, .normalize = true});
  };
  auto train_set = first_n(norm(true), o.limit);
  auto sampler = std::make_shared<dist::DistributedSampler>(
      train_set->size(), world, rank, dist::DistributedSamplerOptions{.seed = o.seed});
  data::DataLoader loader(train_set, {.batch_size = o.batch_size, .sampler = sampler});

  manual_seed(o.seed);  // the same initial model everywhere (DDP broadcasts rank 0's anyway)
  auto model = examples::make_fashion_model(o.model);
  model->to(device);  // before DDP (which broadcasts rank 0's parameters) and the optimizer
  dist::DistributedDataParallel ddp(model);
  manual_seed(o.seed + 1000 + static_cast<uint64_t>(rank));  // per-rank dropout masks
  optim::Adam opt(model->parameters(), {.lr = o.lr});

  // Forward and backward (compiled with --compile); DDP's hooks reduce the
  // gradients as backward produces them. The batch dim is dynamic.
  auto fwd_bwd = kiln::compile(
      [&](const Tensor& x, const Tensor& y) {
        Tensor loss = cross_entropy(ddp(x), y);
        loss.backward();
        return loss;
      },
      {.enabled = o.compile, .dynamic = {{0, 0}, {1, 0}}, .name = "ddp_fwd_bwd"});

  std::shared_ptr<data::Dataset> test_set;
  if (rank == 0) {
    test_set = first_n(norm(false), o.test_limit);
    std::cout << "ddp: " << world << " ranks, " << o.model
              << (o.compile ? " (compiled)" : " (eager)") << ", " << train_set->size()
              << " training images (" << sampler->size() << " per rank), batch " << o.batch_size
              << " per rank (" << o.batch_size * world << " global), " << ddp.num_buckets()
              << " gradient bucket(s), on " << (device.is_cuda() ? "cuda" : "cpu") << " ("
              << pg->backend() << ")" << std::endl;
  }
  double acc = 0;
  for (int epoch = 1; epoch <= o.epochs; ++epoch) {
    const auto t0 = std::chrono::steady_clock::now();
    Tensor loss_sum = zeros({2}, DType::f64);  // (sum of step losses, steps) on this rank
    int64_t steps = 0;
    const int64_t per_epoch =
        o.steps > 0 ? std::min<int64_t>(o.steps, loader.size()) : loader.size();
    for (auto& batch : loader) {
      if (steps == per_epoch) break;
      opt.zero_grad();
      Tensor loss = fwd_bwd(batch[0].to(device), batch[1].to(device));
      opt.step();
      const double l = loss.item<double>();
      loss_sum.data<double>()[0] += l;
      loss_sum.data<double>()[1] += 1;
      ++steps;
      if (rank == 0 && o.log_every > 0 && steps % o.log_every == 0)
        std::cout << "epoch " << epoch << " step " << steps << "/" << per_epoch << " loss "
                  << std::fixed << std::setprecision(4) << l << std::endl;
    }
    // On the group's device (an NCCL group takes CUDA tensors only).
    Tensor sums = loss_sum.to(device);
    pg->all_reduce(sums, dist::ReduceOp::kSum)->wait();
    loss_sum = sums.cpu();
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rank == 0) {
      acc = accuracy(*model, test_set, device);
      const double* s = loss_sum.data<double>();
      std::cout << "epoch " << epoch << " mean loss " << std::fixed << std::setprecision(4)
                << (s[1] > 0 ? s[0] / s[1] : 0.0) << "  test accuracy " << std::setprecision(2)
                << 100.0 * acc << "%  " << std::setprecision(1) << secs << " s  "
                << std::setprecision(1)
                << 1000.0 * secs / static_cast<double>(std::max<int64_t>(steps, 1)) << " ms/step"
                << std::endl;
    }
  }
  if (rank == 0)
    std::cout << "final test accuracy " << std::fixed << std::setprecision(2) << 100.0 * acc << "%"
              << std::endl;
  dist::destroy_process_group();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "missing value after " << a << "\n" << kUsage;
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--model")
      o.model = next();
    else if (a == "--epochs")
      o.epochs = std::atoi(next().c_str());
    else if (a == "--steps")
      o.steps = std::atoll(next().c_str());
    else if (a == "--batch-size" || a == "--batch")
      o.batch_size = std::atoll(next().c_str());
    else if (a == "--lr")
      o.lr = std::atof(next().c_str());
    else if (a == "--limit")
      o.limit = std::atoll(next().c_str());
    else if (a == "--test-limit")
      o.test_limit = std::atoll(next().c_str());
    else if (a == "--root")
      o.root = next();
    else if (a == "--seed")
      o.seed = std::strtoull(next().c_str(), nullptr, 10);
    else if (a == "--compile")
      o.compile = true;
    else if (a == "--log-every")
      o.log_every = std::atoll(next().c_str());
    else if (examples::take_device_option(argc, argv, i, o.device))
      continue;
    else {
      std::cerr << kUsage;
      return a == "--help" ? 0 : 2;
    }
  }
  return examples::run_example(
      o.device, [&] { return run(o); }, std::cerr);
}
