#include "fashion_mnist.h"

#include <chrono>
#include <iomanip>
#include <optional>

#include "kiln/compile.h"
#include "kiln/data/data.h"
#include "kiln/kiln.h"
#include "kiln/optim/optim.h"
#include "kiln/tensorboard/summary_writer.h"

namespace kiln::examples {

std::shared_ptr<nn::Module> make_fashion_model(const std::string& name) {
  using namespace nn;
  auto seq = std::make_shared<Sequential>();
  if (name == "mlp") {
    seq->push_back(std::make_shared<Flatten>());
    seq->push_back(std::make_shared<Linear>(28 * 28, 256));
    seq->push_back(std::make_shared<ReLU>());
    seq->push_back(std::make_shared<Dropout>(0.2));
    seq->push_back(std::make_shared<Linear>(256, 10));
    return seq;
  }
  KILN_CHECK(name == "cnn", "[fashion_mnist] unknown model '", name, "' (use mlp or cnn)");
  nn::Conv2dOptions same;
  same.padding = 1;
  seq->push_back(std::make_shared<Conv2d>(1, 32, 3, same));
  seq->push_back(std::make_shared<ReLU>());
  seq->push_back(std::make_shared<MaxPool2d>(2));
  seq->push_back(std::make_shared<Conv2d>(32, 64, 3, same));
  seq->push_back(std::make_shared<ReLU>());
  seq->push_back(std::make_shared<MaxPool2d>(2));
  seq->push_back(std::make_shared<Flatten>());
  seq->push_back(std::make_shared<Linear>(64 * 7 * 7, 128));
  seq->push_back(std::make_shared<ReLU>());
  seq->push_back(std::make_shared<Dropout>(0.25));
  seq->push_back(std::make_shared<Linear>(128, 10));
  return seq;
}

namespace {

std::shared_ptr<data::Dataset> limited(std::shared_ptr<data::FashionMNIST> ds, int64_t limit) {
  if (limit <= 0 || limit >= static_cast<int64_t>(ds->size())) return ds;
  std::vector<int64_t> idx(static_cast<size_t>(limit));
  for (int64_t i = 0; i < limit; ++i) idx[static_cast<size_t>(i)] = i;
  return std::make_shared<data::Subset>(ds, idx);
}

double evaluate(nn::Module& model, data::DataLoader& loader, Device device) {
  NoGradGuard no_grad;
  model.eval();
  int64_t correct = 0, total = 0;
  for (auto& batch : loader) {
    Tensor pred = argmax(model(batch[0].to(device)), 1);
    correct += sum(eq(pred, batch[1].to(device))).item<int64_t>();
    total += batch[1].numel();
  }
  model.train();
  return total ? static_cast<double>(correct) / static_cast<double>(total) : 0.0;
}

}  // namespace

std::vector<EpochStats> train_fashion_mnist(const FashionOptions& opts, std::ostream& log) {
  manual_seed(opts.seed);
  auto train_full = std::make_shared<data::FashionMNIST>(
      data::FashionMNISTOptions{.root = opts.root, .train = true, .normalize = true});
  auto test_full = std::make_shared<data::FashionMNIST>(
      data::FashionMNISTOptions{.root = opts.root, .train = false, .normalize = true});
  auto train_set = limited(train_full, opts.train_limit);
  auto test_set = limited(test_full, opts.test_limit);
  data::DataLoader train_loader(train_set, {.batch_size = opts.batch_size,
                                            .shuffle = true,
                                            .seed = opts.seed,
                                            .num_workers = opts.num_workers});
  data::DataLoader test_loader(test_set, {.batch_size = 500, .num_workers = opts.num_workers});

  auto model = make_fashion_model(opts.model);
  model->to(opts.device);  // before the optimizer, whose state follows the parameters
  optim::Adam opt(model->parameters(), {.lr = opts.lr});
  log << *model << "\n";
  log << "training " << opts.model << (opts.compile ? " (compiled)" : " (eager)") << " on "
      << train_set->size() << " images, testing on " << test_set->size() << "\n";

  // One training step; with --compile it is traced once (forward, backward and
  // the Adam update in one graph) and replayed; the batch dim is dynamic so the
  // last, smaller batch reuses the plan.
  auto train_step = [&](const Tensor& x, const Tensor& y) {
    Tensor loss = cross_entropy((*model)(x), y);
    opt.zero_grad();
    loss.backward();
    opt.step();
    return loss;
  };
  auto step = kiln::compile(
      train_step,
      {.enabled = opts.compile, .dynamic = {{0, 0}, {1, 0}}, .name = "fashion_train_step"});

  // TensorBoard: the loss of every step, and per epoch the mean loss, the test
  // accuracy and the learning rate.
  std::optional<tensorboard::SummaryWriter> tb;
  if (!opts.logdir.empty()) tb.emplace(opts.logdir);
  int64_t global_step = 0;

  std::vector<EpochStats> stats;
  for (int epoch = 1; epoch <= opts.epochs; ++epoch) {
    auto t0 = std::chrono::steady_clock::now();
    data::ProgressBar bar(static_cast<int64_t>(train_loader.size()));
    double loss_sum = 0;
    int64_t steps = 0, samples = 0;
    for (auto& batch : train_loader) {
      Tensor loss = step(batch[0].to(opts.device), batch[1].to(opts.device));
      double l = loss.item<double>();
      loss_sum += l;
      if (tb) tb->add_scalar("loss/train_step", l, global_step);
      ++global_step;
      ++steps;
      samples += batch[1].numel();
      bar.update(l, batch[1].numel());
    }
    bar.close();
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EpochStats s;
    s.train_loss = steps ? loss_sum / static_cast<double>(steps) : 0.0;
    s.seconds = secs;
    s.samples_per_second = secs > 0 ? static_cast<double>(samples) / secs : 0.0;
    s.ms_per_step = steps ? 1000.0 * secs / static_cast<double>(steps) : 0.0;
    s.test_accuracy = evaluate(*model, test_loader, opts.device);
    stats.push_back(s);
    if (tb) {
      tb->add_scalar("loss/train", s.train_loss, epoch);
      tb->add_scalar("accuracy/test", s.test_accuracy, epoch);
      tb->add_scalar("lr", opt.param_groups()[0].get("lr"), epoch);
      tb->flush();  // an epoch's figures are on disk when its line is printed
    }
    log << "epoch " << epoch << "  loss " << std::fixed << std::setprecision(4) << s.train_loss
        << "  test accuracy " << std::setprecision(2) << 100.0 * s.test_accuracy << "%  "
        << std::setprecision(1) << s.seconds << " s  " << std::setprecision(0)
        << s.samples_per_second << " samples/s" << std::endl;
  }
  return stats;
}

void compare_eager_compiled(FashionOptions opts, std::ostream& log, std::ostream& out) {
  // Each run logs to its own TensorBoard run, so the two curves sit side by side.
  const std::string logdir = opts.logdir;
  opts.compile = false;
  if (!logdir.empty()) opts.logdir = logdir + "/eager";
  const std::vector<EpochStats> eager = train_fashion_mnist(opts, log);
  opts.compile = true;
  if (!logdir.empty()) opts.logdir = logdir + "/compiled";
  const std::vector<EpochStats> comp = train_fashion_mnist(opts, log);
  // The first compiled epoch pays for tracing and JIT compilation; the steady
  // state is the last epoch (the first one when there is only one).
  auto steady = [](const std::vector<EpochStats>& s) { return s.back(); };
  const EpochStats e = steady(eager), c = steady(comp);
  out << "\n"
      << opts.model << " on Fashion-MNIST, " << opts.epochs << " epoch(s), batch "
      << opts.batch_size << " (last epoch's figures)\n";
  out << std::left << std::setw(10) << "" << std::right << std::setw(14) << "ms / step"
      << std::setw(14) << "samples/s" << std::setw(16) << "test accuracy"
      << "\n";
  auto row = [&](const char* name, const EpochStats& s) {
    out << std::left << std::setw(10) << name << std::right << std::fixed << std::setprecision(2)
        << std::setw(14) << s.ms_per_step << std::setprecision(0) << std::setw(14)
        << s.samples_per_second << std::setprecision(2) << std::setw(15) << 100.0 * s.test_accuracy
        << "%\n";
  };
  row("eager", e);
  row("compiled", c);
  out << "speedup (eager / compiled time per step): " << std::setprecision(2)
      << (c.ms_per_step > 0 ? e.ms_per_step / c.ms_per_step : 0.0) << "x; first compiled epoch "
      << std::setprecision(1) << comp.front().seconds << " s (includes compilation) vs eager "
      << eager.front().seconds << " s" << std::endl;
}

}  // namespace kiln::examples
