#include "gpt.h"

#include <cmath>
#include <iomanip>
#include <limits>

#include "kiln/kiln.h"

namespace kiln::examples {

const std::string& gpt_text() {
  static const std::string text =
      "The kiln stands at the end of the lane, behind the old mill. In the morning the potter "
      "opens the door, sweeps the ash from the floor and stacks the dry pots on the shelves. "
      "The fire is lit at noon. It burns slowly at first, then hotter and hotter, until the "
      "bricks glow red and the air above the chimney shakes. The potter watches the flame "
      "through a small hole in the wall and adds wood every hour. At night the fire is white. "
      "Nobody sleeps. In the morning the potter lets the fire die and waits. The kiln cools "
      "for two days. When the door is opened again the pots are hard and bright, and each "
      "one rings like a bell when it is tapped. Some have cracked, and those are broken and "
      "buried under the lane. The rest are carried to the market in the town, where people "
      "buy them for water, for milk, for oil and for flowers. The potter walks home in the "
      "evening, and the next day the work begins again: clay from the river, the wheel, the "
      "drying shelves, the kiln.\n";
  return text;
}

CharTokenizer::CharTokenizer(const std::string& text) {
  bool seen[256] = {};
  for (unsigned char c : text) seen[c] = true;
  for (int c = 0; c < 256; ++c)
    if (seen[c]) chars_ += static_cast<char>(c);
}

Tensor CharTokenizer::encode(const std::string& s) const {
  std::vector<int64_t> ids;
  for (char c : s) {
    const size_t i = chars_.find(c);
    KILN_CHECK(i != std::string::npos, "[CharTokenizer] character '", c,
               "' is not in the vocabulary");
    ids.push_back(static_cast<int64_t>(i));
  }
  return from_vector(ids);
}

std::string CharTokenizer::decode(const Tensor& ids) const {
  std::string s;
  for (int64_t i : ids.cpu().to(DType::i64).to_vector<int64_t>())
    s += chars_.at(static_cast<size_t>(i));
  return s;
}

GptBlock::GptBlock(const GptOptions& o) {
  ln1 = register_module("ln1", std::make_shared<nn::LayerNorm>(o.n_embd));
  attn = register_module(
      "attn", std::make_shared<nn::MultiheadAttention>(
                  o.n_embd, o.n_head, nn::MultiheadAttentionOptions{.dropout = o.dropout}));
  ln2 = register_module("ln2", std::make_shared<nn::LayerNorm>(o.n_embd));
  mlp = register_module(
      "mlp", std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(o.n_embd, 4 * o.n_embd),
                                              std::make_shared<nn::GELU>(),
                                              std::make_shared<nn::Linear>(4 * o.n_embd, o.n_embd),
                                              std::make_shared<nn::Dropout>(o.dropout)));
  register_buffer("causal", causal, triu(ones({o.block_size, o.block_size}, DType::b8), 1), false);
}

Tensor GptBlock::forward(const Tensor& x) {
  const int64_t T = x.size(1);
  // Every position sees itself and the past only.
  Tensor mask = causal.slice(0, 0, T).slice(1, 0, T);
  Tensor h = (*ln1)(x);
  auto [a, weights] = (*attn)(h, h, h, mask);
  Tensor y = x + a;
  return y + (*mlp)((*ln2)(y));
}

Gpt::Gpt(const GptOptions& o, int64_t vocab_size) : block_size_(o.block_size) {
  wte = register_module("wte", std::make_shared<nn::Embedding>(vocab_size, o.n_embd));
  wpe = register_module("wpe", std::make_shared<nn::Embedding>(o.block_size, o.n_embd));
  blocks = register_module("blocks", std::make_shared<nn::ModuleList>());
  for (int64_t i = 0; i < o.n_layer; ++i) blocks->push_back(std::make_shared<GptBlock>(o));
  ln_f = register_module("ln_f", std::make_shared<nn::LayerNorm>(o.n_embd));
  head = register_module("head", std::make_shared<nn::Linear>(o.n_embd, vocab_size, false));
  register_buffer("positions", positions, arange(o.block_size), false);
  head->weight = wte->weight;  // weight tying, as in PyTorch
  // GPT-2's initialisation (nanoGPT's _init_weights): N(0, 0.02), zero biases.
  apply([](nn::Module& m) {
    if (auto* lin = dynamic_cast<nn::Linear*>(&m)) {
      nn::init::normal_(lin->weight, 0.0, 0.02);
      if (lin->bias.defined()) nn::init::zeros_(lin->bias);
    } else if (auto* emb = dynamic_cast<nn::Embedding*>(&m)) {
      nn::init::normal_(emb->weight, 0.0, 0.02);
    }
  });
}

Tensor Gpt::forward(const Tensor& idx) {
  const int64_t T = idx.size(1);
  KILN_CHECK(T <= block_size_, "[Gpt] sequence of length ", T, " is longer than block_size ",
             block_size_);
  Tensor x = (*wte)(idx) + (*wpe)(positions.slice(0, 0, T));
  for (const auto& block : *blocks) x = (*block)(x);
  return (*head)((*ln_f)(x));
}

Tensor Gpt::generate(Tensor idx, int64_t max_new_tokens, double temperature, int64_t top_k) {
  InferenceMode guard;
  for (int64_t i = 0; i < max_new_tokens; ++i) {
    // Crop the context to the last block_size tokens.
    Tensor idx_cond = idx.slice(1, -block_size_);  // idx[:, -block_size:]
    // The last position's logits [B, vocab], sampled from where the model
    // runs (top-k, softmax and multinomial run on CUDA too): the tokens stay
    // there until sample_text decodes them (multinomial reads back only its
    // 8-byte weight check).
    Tensor logits = forward(idx_cond).select(1, -1) / temperature;
    if (top_k > 0) {
      auto [v, ix] = logits.topk(std::min(top_k, logits.size(-1)));
      // Everything below the k-th largest logit is never drawn.
      logits = logits.masked_fill(logits < v.select(1, -1).unsqueeze(1),
                                  -std::numeric_limits<double>::infinity());
    }
    Tensor probs = logits.softmax(-1);
    Tensor next = probs.multinomial(1);  // [B, 1]
    idx = cat({idx, next}, 1);
  }
  return idx;
}

namespace {

// batch_size random windows of `data`: inputs and the same windows shifted by
// one, on o.device (drawn on the CPU: every device trains on the same batches).
std::pair<Tensor, Tensor> get_batch(const Tensor& data, const GptOptions& o) {
  Tensor ix = randint(0, data.size(0) - o.block_size - 1, {o.batch_size});
  std::vector<Tensor> xs, ys;
  for (int64_t i : ix.to_vector<int64_t>()) {
    xs.push_back(data.slice(0, i, i + o.block_size));
    ys.push_back(data.slice(0, i + 1, i + 1 + o.block_size));
  }
  return {stack(xs).to(o.device), stack(ys).to(o.device)};
}

}  // namespace

GptResult train_gpt(const GptOptions& o, std::ostream& log) {
  manual_seed(o.seed);
  GptResult r;
  r.tokenizer = std::make_shared<CharTokenizer>(gpt_text());
  const int64_t vocab = r.tokenizer->vocab_size();
  Tensor data = r.tokenizer->encode(gpt_text());
  r.model = std::make_shared<Gpt>(o, vocab);
  Gpt& model = *r.model;
  model.to(o.device);  // before the optimizer, whose state follows the parameters

  // Weight decay on matrices only; biases and LayerNorm weights do not decay.
  std::vector<Tensor> decay, no_decay;
  for (const auto& [name, p] : model.named_parameters())
    (p.dim() >= 2 ? decay : no_decay).push_back(p);
  optim::AdamW opt({optim::ParamGroup{decay, {{"weight_decay", o.weight_decay}}},
                    optim::ParamGroup{no_decay, {{"weight_decay", 0.0}}}},
                   {.lr = o.lr, .betas = {0.9, 0.95}});
  // Linear warm-up from lr / 100, then cosine decay to lr / 10.
  optim::SequentialLR sched(
      opt,
      {std::make_shared<optim::LinearLR>(opt, 0.01, 1.0, o.warmup_steps),
       std::make_shared<optim::CosineAnnealingLR>(opt, o.steps - o.warmup_steps, o.lr / 10)},
      {o.warmup_steps});
  log << "GPT: " << model.parameters().size() << " parameter tensors (head tied to wte), vocab "
      << vocab << ", " << data.size(0) << " characters of text, on " << o.device << "\n";

  auto train_step = [&](const Tensor& x, const Tensor& y) {
    Tensor logits = model(x);
    Tensor loss = cross_entropy(logits.view({-1, vocab}), y.view({-1}));
    opt.zero_grad();
    loss.backward();
    optim::clip_grad_norm_(model.parameters(), o.grad_clip);
    opt.step();
    return loss;
  };
  auto step = kiln::compile(train_step, {.enabled = o.compile, .name = "gpt_train_step"});

  for (int it = 1; it <= o.steps; ++it) {
    auto [x, y] = get_batch(data, o);
    r.lrs.push_back(opt.param_groups()[0].lr());
    Tensor loss = step(x, y);
    sched.step();
    r.losses.push_back(loss.item<double>());
    if (it == 1 || it % 20 == 0 || it == o.steps)
      log << "step " << std::setw(5) << it << "  loss " << std::fixed << std::setprecision(4)
          << r.losses.back() << "  lr " << std::scientific << std::setprecision(2) << r.lrs.back()
          << std::defaultfloat << std::endl;
  }
  if (o.compile) r.compile_stats = step.stats();
  return r;
}

std::string sample_text(Gpt& model, const CharTokenizer& tok, const std::string& prompt, int64_t n,
                        double temperature, int64_t top_k) {
  model.eval();
  Tensor idx = tok.encode(prompt).unsqueeze(0).to(model.wte->weight.device());
  Tensor out = model.generate(idx, n, temperature, top_k);
  model.train();
  return tok.decode(out.select(0, 0));
}

}  // namespace kiln::examples
