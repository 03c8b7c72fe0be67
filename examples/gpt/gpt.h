// A character-level GPT on a small built-in text, written as a PyTorch user
// would (nanoGPT's recipe): token + position embeddings, pre-norm transformer
// blocks with causal self-attention, the output head tied to the token
// embedding, AdamW with decay / no-decay parameter groups, linear warm-up then
// cosine decay, gradient clipping, and sampling with temperature and top-k.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "kiln/compile.h"
#include "kiln/device.h"
#include "kiln/nn/nn.h"

namespace kiln::examples {

/// Model size and training schedule (small defaults: a run takes seconds).
struct GptOptions {
  int64_t block_size = 32;  ///< context length
  int64_t n_embd = 32;
  int64_t n_head = 2;
  int64_t n_layer = 2;
  double dropout = 0.0;
  int64_t batch_size = 16;
  int steps = 60;
  int warmup_steps = 10;  ///< linear warm-up, then cosine decay to lr / 10
  double lr = 3e-3;
  double weight_decay = 0.1;  ///< on matrices (embeddings, linear weights) only
  double grad_clip = 1.0;
  uint64_t seed = 0;
  bool compile = false;  ///< run the training step through kiln::compile
  /// Where the model trains (batches are drawn on the CPU, then moved there).
  Device device = Device::cpu();
};

/// The built-in training text (a few paragraphs of plain English).
const std::string& gpt_text();

/// Characters <-> token ids (sorted unique characters of a text).
class CharTokenizer {
 public:
  explicit CharTokenizer(const std::string& text);
  int64_t vocab_size() const { return static_cast<int64_t>(chars_.size()); }
  /// i64 [n] token ids; kiln::Error naming a character outside the vocabulary.
  Tensor encode(const std::string& s) const;
  /// The text of a 1-D integer tensor of token ids.
  std::string decode(const Tensor& ids) const;

 private:
  std::string chars_;
};

/// One transformer block: x + attn(ln1(x)), then + mlp(ln2(x)).
class GptBlock : public nn::Module {
 public:
  explicit GptBlock(const GptOptions& o);
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<nn::LayerNorm> ln1, ln2;
  std::shared_ptr<nn::MultiheadAttention> attn;
  std::shared_ptr<nn::Sequential> mlp;
  /// bool [block_size, block_size], true above the diagonal (may not attend):
  /// a buffer, as nanoGPT's, so it moves with the model (not saved).
  Tensor causal;
};

/// The language model: tokens i64 [B, T] (T <= block_size) -> logits [B, T, vocab].
class Gpt : public nn::Module {
 public:
  Gpt(const GptOptions& o, int64_t vocab_size);
  Tensor forward(const Tensor& idx) override;
  /// Appends max_new_tokens sampled tokens to idx [B, T]: the last position's
  /// logits / temperature, cut to the top_k largest (0: all), softmax, multinomial.
  Tensor generate(Tensor idx, int64_t max_new_tokens, double temperature = 1.0, int64_t top_k = 0);

  std::shared_ptr<nn::Embedding> wte, wpe;
  std::shared_ptr<nn::ModuleList> blocks;
  std::shared_ptr<nn::LayerNorm> ln_f;
  std::shared_ptr<nn::Linear> head;
  /// i64 [block_size]: 0, 1, ... (a buffer: it moves with the model; not saved).
  Tensor positions;

 private:
  int64_t block_size_;
};

/// Figures of a run.
struct GptResult {
  std::vector<double> losses;  ///< per step
  std::vector<double> lrs;     ///< learning rate used at each step
  CompileStats compile_stats;  ///< of the compiled step (zeros when eager)
  std::shared_ptr<Gpt> model;
  std::shared_ptr<CharTokenizer> tokenizer;
};

/// Trains on random windows of gpt_text(), printing progress to `log`.
GptResult train_gpt(const GptOptions& opts, std::ostream& log);

/// Samples `n` characters after `prompt` (eval mode, no grad) on the model's device.
std::string sample_text(Gpt& model, const CharTokenizer& tok, const std::string& prompt, int64_t n,
                        double temperature, int64_t top_k);

}  // namespace kiln::examples
