// See hf_tokenizer.h.
#include "engine/checkpoint/hf_tokenizer.h"

#include <filesystem>

#include "engine/checkpoint/files.h"
#include "engine/data/tokenizer.h"
#include "engine/json.h"
#include "kernels/error.h"

namespace trainer::engine::checkpoint {

namespace fs = std::filesystem;

HfTokenizerExport::HfTokenizerExport(const std::string& vocab_path, const std::string& merges_path,
                                     const model::ModelConfig& cfg)
    : max_seq_len_(cfg.max_seq_len) {
  TRAINER_INPUT_CHECK(fs::is_regular_file(vocab_path), "--vocab {}: no such file", vocab_path);
  TRAINER_INPUT_CHECK(fs::is_regular_file(merges_path), "--merges {}: no such file", merges_path);
  vocab_ = read_text_file(vocab_path);
  merges_ = read_text_file(merges_path);
  const data::Tokenizer tok = data::Tokenizer::from_text(vocab_, merges_, vocab_path, merges_path);
  TRAINER_INPUT_CHECK(tok.vocab_size() <= cfg.vocab_size,
                      "--vocab {}: ids up to {}, beyond model.vocab_size {} of the checkpoint",
                      vocab_path, tok.vocab_size() - 1, cfg.vocab_size);
  eot_id_ = tok.eot_id();
  // GPT2Tokenizer drops the first line of merges.txt (its "#version" header)
  // and the text after the last newline: give it both, or it loses merges.
  if (merges_.rfind("#version", 0) != 0) merges_ = "#version: 0.2\n" + merges_;
  if (merges_.back() != '\n') merges_ += '\n';
}

void HfTokenizerExport::write(const std::string& out_dir) const {
  const fs::path dir(out_dir);
  replace_file_atomically((dir / "vocab.json").string(), vocab_);
  replace_file_atomically((dir / "merges.txt").string(), merges_);
  Json specials = Json::object();
  if (eot_id_ >= 0)
    for (const char* key : {"bos_token", "eos_token", "unk_token"}) specials.set(key, Json("<|endoftext|>"));
  Json config = Json::object();
  config.set("tokenizer_class", Json("GPT2Tokenizer"));
  config.set("model_max_length", Json(max_seq_len_));
  config.set("add_prefix_space", Json(false));
  config.set("errors", Json("replace"));
  // Byte-level BPE decodes to the exact text; transformers' clean-up would
  // drop the space before "." or "'s".
  config.set("clean_up_tokenization_spaces", Json(false));
  for (const auto& [key, value] : specials.members()) config.set(key, value);
  replace_file_atomically((dir / "tokenizer_config.json").string(), config.dump(2) + "\n");
  replace_file_atomically((dir / "special_tokens_map.json").string(), specials.dump(2) + "\n");
}

}  // namespace trainer::engine::checkpoint
