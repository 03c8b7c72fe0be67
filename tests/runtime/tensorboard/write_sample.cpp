// Writes the event files that read_events.py checks with TensorBoard's own
// reader: write_sample DIR. Every value here is mirrored in read_events.py.
#include <cmath>
#include <iostream>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/tensorboard/summary_writer.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: write_sample DIR\n";
    return 2;
  }
  try {
    namespace tb = kiln::tensorboard;
    // max_queue 3: some events reach the file through the queue, the rest at close.
    tb::SummaryWriter w(argv[1], {.max_queue = 3});
    for (int step = 0; step < 40; ++step) w.add_scalar("loss/train", 1.0 / (1 << (step % 8)), step);
    w.add_scalar("lr", 0.001, 0, 1234567890.5);
    w.add_scalar("lr", NAN, 1);
    w.add_scalar("lr", -INFINITY, 2);
    w.add_scalars("acc/epoch", {{"train", 0.75}, {"test", 0.5}}, 3);
    w.add_scalars("acc/epoch", {{"train", 0.875}, {"test", 0.625}}, 4);
    w.add_histogram("weights", std::vector<double>{-2, -1, 0, 0, 0.5, 1, 3, 1e-13, -1e30}, 7);
    kiln::manual_seed(0);
    w.add_histogram("activations", kiln::randn({10, 100}), 8);
    w.add_histogram("ints", kiln::arange(0, 10, 1, kiln::DType::i64), 9);
    w.add_text("notes", "hello **kiln** caf\xc3\xa9", 2);
    w.flush();
    w.add_text("notes", "second", 5);
    w.close();
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
