// Trains a small character-level GPT on a built-in text, then samples from it.
//   gpt [--steps N] [--layers N] [--embd N] [--heads N] [--block N] [--batch N]
//       [--lr X] [--compile] [--seed N] [--sample N] [--temperature X] [--top-k N]
//       [--device cpu|cuda]
// The defaults train for seconds; e.g. `gpt --steps 2000 --layers 4 --embd 64`
// learns the text well enough to recite parts of it.
#include <cstdlib>
#include <iostream>
#include <string>

#include "example_main.h"
#include "gpt.h"
#include "kiln/functional.h"

int main(int argc, char** argv) {
  kiln::examples::GptOptions o;
  int64_t sample = 200, top_k = 10;
  double temperature = 0.8;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (kiln::examples::take_device_option(argc, argv, i, o.device)) {
    } else if (a == "--compile") {
      o.compile = true;
    } else if (a == "--steps" && has_value) {
      o.steps = std::atoi(argv[++i]);
      o.warmup_steps = std::max(1, o.steps / 6);
    } else if (a == "--layers" && has_value) {
      o.n_layer = std::atoll(argv[++i]);
    } else if (a == "--embd" && has_value) {
      o.n_embd = std::atoll(argv[++i]);
    } else if (a == "--heads" && has_value) {
      o.n_head = std::atoll(argv[++i]);
    } else if (a == "--block" && has_value) {
      o.block_size = std::atoll(argv[++i]);
    } else if (a == "--batch" && has_value) {
      o.batch_size = std::atoll(argv[++i]);
    } else if (a == "--lr" && has_value) {
      o.lr = std::atof(argv[++i]);
    } else if (a == "--seed" && has_value) {
      o.seed = std::strtoull(argv[++i], nullptr, 10);
    } else if (a == "--sample" && has_value) {
      sample = std::atoll(argv[++i]);
    } else if (a == "--temperature" && has_value) {
      temperature = std::atof(argv[++i]);
    } else if (a == "--top-k" && has_value) {
      top_k = std::atoll(argv[++i]);
    } else {
      std::cerr << "usage: gpt [--steps N] [--layers N] [--embd N] [--heads N] [--block N] "
                   "[--batch N] [--lr X] [--compile] [--seed N] [--sample N] "
                   "[--temperature X] [--top-k N] "
                << kiln::examples::kDeviceUsage << "\n";
      return a == "--help" ? 0 : 2;
    }
  }
  return kiln::examples::run_example(
      o.device,
      [&] {
        auto r = kiln::examples::train_gpt(o, std::cout);
        kiln::manual_seed(o.seed);
        std::cout << "--- sample (temperature " << temperature << ", top-k " << top_k << ") ---\n"
                  << kiln::examples::sample_text(*r.model, *r.tokenizer, "The ", sample,
                                                 temperature, top_k)
                  << "\n";
        return 0;
      },
      std::cerr);
}
