#include "transformer.h"

#include <iomanip>

#include "kiln/kiln.h"
#include "kiln/nn/nn.h"
#include "kiln/optim/optim.h"

namespace kiln::examples {
namespace {

class Reverser : public nn::Module {
 public:
  explicit Reverser(const ReverseOptions& o) : seq_len_(o.seq_len) {
    tok = register_module("tok", std::make_shared<nn::Embedding>(o.vocab, o.d_model));
    pos = register_module("pos", std::make_shared<nn::Embedding>(o.seq_len, o.d_model));
    nn::TransformerEncoderLayerOptions lo;
    lo.dim_feedforward = 4 * o.d_model;
    lo.dropout = 0.0;
    lo.norm_first = true;
    auto layer = std::make_shared<nn::TransformerEncoderLayer>(o.d_model, o.nhead, lo);
    encoder = register_module("encoder",
                              std::make_shared<nn::TransformerEncoder>(
                                  layer, o.layers, std::make_shared<nn::LayerNorm>(o.d_model)));
    head = register_module("head", std::make_shared<nn::Linear>(o.d_model, o.vocab));
  }
  // tokens: i64 [B, L] -> logits [B, L, vocab]
  Tensor forward(const Tensor& tokens) override {
    Tensor x = (*tok)(tokens) + (*pos)(arange(seq_len_).to(tokens.device()));
    return (*head)((*encoder)(x));
  }

  std::shared_ptr<nn::Embedding> tok, pos;
  std::shared_ptr<nn::TransformerEncoder> encoder;
  std::shared_ptr<nn::Linear> head;

 private:
  int64_t seq_len_;
};

// Random digit sequences and their reversals.
std::pair<Tensor, Tensor> make_batch(const ReverseOptions& o, int64_t n) {
  Tensor x = randint(0, o.vocab, {n, o.seq_len});
  Tensor rev = index_select(x, 1, arange(o.seq_len - 1, -1, -1));
  return {x, rev};
}

}  // namespace

ReverseResult train_reverse(const ReverseOptions& o, std::ostream& log) {
  manual_seed(o.seed);
  auto model = std::make_shared<Reverser>(o);
  model->to(o.device);  // before the optimizer, whose state follows the parameters
  optim::AdamW opt(model->parameters(), {.lr = o.lr, .weight_decay = 0.01});
  optim::OneCycleLR sched(opt, o.lr, o.steps);
  ReverseResult r;
  for (int step = 1; step <= o.steps; ++step) {
    auto [x, y] = make_batch(o, o.batch_size);
    Tensor logits = (*model)(x.to(o.device));
    Tensor loss = cross_entropy(logits.reshape({-1, o.vocab}), y.to(o.device).reshape({-1}));
    opt.zero_grad();
    loss.backward();
    optim::clip_grad_norm_(model->parameters(), 1.0);
    opt.step();
    sched.step();
    r.losses.push_back(loss.item<double>());
    if (step % 100 == 0 || step == o.steps)
      log << "step " << std::setw(5) << step << "  loss " << std::fixed << std::setprecision(4)
          << r.losses.back() << std::endl;
  }
  NoGradGuard no_grad;
  model->eval();
  auto [x, y] = make_batch(o, 1024);
  Tensor pred = argmax((*model)(x.to(o.device)).cpu(), -1);
  Tensor hit = eq(pred, y);
  r.token_accuracy = sum(hit).item<double>() / static_cast<double>(hit.numel());
  r.sequence_accuracy =
      sum(eq(sum(hit, {1}), o.seq_len)).item<double>() / static_cast<double>(x.size(0));
  log << "token accuracy " << std::setprecision(2) << 100 * r.token_accuracy
      << "%  sequence accuracy " << 100 * r.sequence_accuracy << "%" << std::endl;
  return r;
}

}  // namespace kiln::examples
