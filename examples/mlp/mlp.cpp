#include "mlp.h"

#include <cmath>
#include <iomanip>
#include <optional>

#include "kiln/kiln.h"
#include "kiln/nn/nn.h"
#include "kiln/optim/optim.h"
#include "kiln/tensorboard/summary_writer.h"

namespace kiln::examples {

MlpResult train_mlp(int epochs, std::ostream& log, double lr, Device device,
                    const std::string& logdir) {
  manual_seed(0);
  // Three samples, two features; label 1 when the second feature dominates.
  Tensor x = from_vector<float>({0.1f, 0.9f, 0.8f, 0.2f, 0.3f, 0.7f}, {3, 2}).to(device);
  Tensor y = from_vector<float>({1.f, 0.f, 1.f}, {3, 1}).to(device);

  auto model = std::make_shared<nn::Sequential>();
  model->push_back(std::make_shared<nn::Linear>(2, 5));
  model->push_back(std::make_shared<nn::ReLU>());
  model->push_back(std::make_shared<nn::Linear>(5, 1));
  model->push_back(std::make_shared<nn::Sigmoid>());
  model->to(device);  // before the optimizer, whose state follows the parameters
  nn::BCELoss criterion;
  optim::SGD opt(model->parameters(), {.lr = lr});

  std::optional<tensorboard::SummaryWriter> tb;
  if (!logdir.empty()) tb.emplace(logdir);
  MlpResult result;
  for (int epoch = 1; epoch <= epochs; ++epoch) {
    Tensor loss = criterion(model->forward(x), y);
    opt.zero_grad();
    loss.backward();
    opt.step();
    double l = loss.item<double>();
    result.losses.push_back(l);
    if (tb) {
      tb->add_scalar("loss/train", l, epoch);
      tb->add_scalar("lr", opt.param_groups()[0].get("lr"), epoch);
    }
    if (epoch % 100 == 0)
      log << "epoch " << std::setw(4) << epoch << "  loss " << std::fixed << std::setprecision(6)
          << l << "\n";
  }

  NoGradGuard no_grad;
  Tensor p = model->forward(x);
  Tensor correct = eq(gt(p, 0.5), gt(y, 0.5));
  result.accuracy = sum(correct).item<double>() / 3.0;
  if (tb) tb->add_scalar("accuracy/train", result.accuracy, epochs);
  log << "accuracy " << std::fixed << std::setprecision(3) << result.accuracy << "\n";
  return result;
}

}  // namespace kiln::examples
