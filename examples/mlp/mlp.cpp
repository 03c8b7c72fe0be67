#include "mlp.h"

#include <cmath>
#include <iomanip>

#include "kiln/kiln.h"

namespace kiln::examples {

MlpResult train_mlp(int epochs, std::ostream& log, double lr) {
  manual_seed(0);
  // Three samples, two features; label 1 when the second feature dominates.
  Tensor x = from_vector<float>({0.1f, 0.9f, 0.8f, 0.2f, 0.3f, 0.7f}, {3, 2});
  Tensor y = from_vector<float>({1.f, 0.f, 1.f}, {3, 1});

  // PyTorch's Linear initialization: U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
  auto uniform = [](const Dims& shape, double fan_in) {
    double b = 1.0 / std::sqrt(fan_in);
    return (rand(shape) * (2 * b) - b).requires_grad_();
  };
  Tensor w1 = uniform({2, 5}, 2), b1 = uniform({5}, 2);
  Tensor w2 = uniform({5, 1}, 5), b2 = uniform({1}, 5);
  std::vector<Tensor> params{w1, b1, w2, b2};

  MlpResult result;
  for (int epoch = 1; epoch <= epochs; ++epoch) {
    Tensor h = relu(matmul(x, w1) + b1);
    Tensor p = sigmoid(matmul(h, w2) + b2);
    Tensor loss = binary_cross_entropy(p, y);
    for (Tensor& t : params) t.set_grad({});
    loss.backward();
    {
      NoGradGuard no_grad;
      for (Tensor& t : params) t.sub_(t.grad(), lr);
    }
    double l = loss.item<double>();
    result.losses.push_back(l);
    if (epoch % 100 == 0)
      log << "epoch " << std::setw(4) << epoch << "  loss " << std::fixed << std::setprecision(6)
          << l << "\n";
  }

  NoGradGuard no_grad;
  Tensor p = sigmoid(matmul(relu(matmul(x, w1) + b1), w2) + b2);
  Tensor correct = eq(gt(p, 0.5), gt(y, 0.5));
  result.accuracy = sum(correct).item<double>() / 3.0;
  log << "accuracy " << std::fixed << std::setprecision(3) << result.accuracy << "\n";
  return result;
}

}  // namespace kiln::examples
