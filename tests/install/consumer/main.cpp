// A user's program built against an installed kiln: eager autograd, a training
// step through kiln::compile (which needs libkiln_codegen and, through it,
// libkiln_passes and libkiln_ir) and, run as `consumer --worker` under kilnrun,
// an all-reduce over the ranks.
#include <iostream>
#include <string>

#include <kiln/compile.h>
#include <kiln/distributed/process_group.h>
#include <kiln/kiln.h>

namespace {

// Each rank contributes rank + 1; rank 0 prints the sum.
int worker() {
  kiln::dist::init_process_group();
  kiln::Tensor t = kiln::full({4}, static_cast<double>(kiln::dist::get_rank() + 1));
  kiln::dist::default_group()->all_reduce(t)->wait();
  if (kiln::dist::get_rank() == 0) std::cout << "allreduce=" << t.sum().item<float>() / 4 << "\n";
  kiln::dist::destroy_process_group();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--worker") return worker();
  kiln::Tensor x = kiln::from_vector<float>({1, 2, 3}).requires_grad_();
  kiln::Tensor y = (x * x).sum();
  y.backward();
  std::cout << "sum=" << kiln::sum(x).item<float>() << " grad=" << x.grad() << "\n";

  // Three steps of linear regression, compiled (the first call runs eagerly as a warm-up).
  kiln::manual_seed(0);
  auto model = std::make_shared<kiln::nn::Linear>(3, 1);
  kiln::optim::SGD opt(model->parameters(), {.lr = 0.05});
  auto step = kiln::compile([&](const kiln::Tensor& in, const kiln::Tensor& target) {
    kiln::Tensor loss = kiln::mse_loss(model->forward(in), target);
    opt.zero_grad();
    loss.backward();
    opt.step();
    return loss;
  });
  kiln::Tensor in = kiln::from_vector<float>({1, 0, 0, 0, 1, 0, 0, 0, 1, 1, 1, 1}, {4, 3});
  kiln::Tensor target = kiln::from_vector<float>({1, 2, 3, 6}, {4, 1});
  float first = 0, last = 0;
  for (int i = 0; i < 3; ++i) {
    last = step(in, target).item<float>();
    if (i == 0) first = last;
  }
  std::cout << "compiled loss " << first << " -> " << last << (last < first ? " down" : " up")
            << "\n";
  return 0;
}
