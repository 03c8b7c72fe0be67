// A user's program built against an installed kiln.
#include <iostream>

#include <kiln/kiln.h>

int main() {
  kiln::Tensor x = kiln::from_vector<float>({1, 2, 3}).requires_grad_();
  kiln::Tensor y = (x * x).sum();
  y.backward();
  std::cout << "sum=" << kiln::sum(x).item<float>() << " grad=" << x.grad() << "\n";
  return 0;
}
