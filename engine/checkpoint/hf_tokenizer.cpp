// See hf_tokenizer.h.
#include "engine/checkpoint/hf_tokenizer.h"

#include <filesystem>

#include "engine/checkpoint/files.h"
#include "engine/data/tokenizer.h"
#include "engine/json.h"
#include "kernels/error.h"

namespace trainer::engine::checkpoint {

namespace fs = std::filesystem;

namespace {

void check_fits(const data::Tokenizer& tok, const std::string& option, const std::string& path,
                const model::ModelConfig& cfg) {
  TRAINER_INPUT_CHECK(tok.vocab_size() <= cfg.vocab_size,
                      "{} {}: ids up to {}, beyond model.vocab_size {} of the checkpoint", option, path,
                      tok.vocab_size() - 1, cfg.vocab_size);
}

}  // namespace

HfTokenizerExport HfTokenizerExport::gpt2_files(const std::string& vocab_path, const std::string& merges_path,
                                                const model::ModelConfig& cfg) {
  TRAINER_INPUT_CHECK(fs::is_regular_file(vocab_path), "--vocab {}: no such file", vocab_path);
  TRAINER_INPUT_CHECK(fs::is_regular_file(merges_path), "--merges {}: no such file", merges_path);
  HfTokenizerExport t;
  t.max_seq_len_ = cfg.max_seq_len;
  t.vocab_ = read_text_file(vocab_path);
  t.merges_ = read_text_file(merges_path);
  const data::Tokenizer tok = data::Tokenizer::from_text(t.vocab_, t.merges_, vocab_path, merges_path);
  check_fits(tok, "--vocab", vocab_path, cfg);
  t.eos_id_ = t.bos_id_ = tok.eot_id();  // GPT-2's bos, eos and unk are <|endoftext|>
  if (t.eos_id_ >= 0) t.bos_ = t.eos_ = "<|endoftext|>";
  // GPT2Tokenizer drops the first line of merges.txt (its "#version" header)
  // and the text after the last newline: give it both, or it loses merges.
  if (t.merges_.rfind("#version", 0) != 0) t.merges_ = "#version: 0.2\n" + t.merges_;
  if (t.merges_.back() != '\n') t.merges_ += '\n';
  return t;
}

HfTokenizerExport HfTokenizerExport::tokenizer_json(const std::string& path, const model::ModelConfig& cfg) {
  TRAINER_INPUT_CHECK(fs::is_regular_file(path), "--tokenizer {}: no such file", path);
  HfTokenizerExport t;
  t.max_seq_len_ = cfg.max_seq_len;
  t.tokenizer_json_ = read_text_file(path);
  const data::Tokenizer tok = data::Tokenizer::from_hf_text(t.tokenizer_json_, path);
  check_fits(tok, "--tokenizer", path, cfg);
  t.eos_id_ = tok.eot_id();
  t.bos_id_ = tok.bos_id() >= 0 ? tok.bos_id() : t.eos_id_;
  if (t.eos_id_ >= 0) t.eos_ = tok.token_bytes(t.eos_id_);
  if (t.bos_id_ >= 0) t.bos_ = tok.token_bytes(t.bos_id_);
  if (tok.unk_id() >= 0) t.unk_ = tok.token_bytes(tok.unk_id());  // SentencePiece's <unk>
  return t;
}

void HfTokenizerExport::write(const std::string& out_dir) const {
  const fs::path dir(out_dir);
  const bool fast = !tokenizer_json_.empty();
  if (fast) {
    replace_file_atomically((dir / "tokenizer.json").string(), tokenizer_json_);
  } else {
    replace_file_atomically((dir / "vocab.json").string(), vocab_);
    replace_file_atomically((dir / "merges.txt").string(), merges_);
  }
  Json specials = Json::object();
  if (!bos_.empty()) specials.set("bos_token", Json(bos_));
  if (!eos_.empty()) specials.set("eos_token", Json(eos_));
  if (!fast && !eos_.empty()) specials.set("unk_token", Json(eos_));
  if (!unk_.empty()) specials.set("unk_token", Json(unk_));
  Json config = Json::object();
  config.set("tokenizer_class", Json(fast ? "PreTrainedTokenizerFast" : "GPT2Tokenizer"));
  config.set("model_max_length", Json(max_seq_len_));
  if (!fast) {
    config.set("add_prefix_space", Json(false));
    config.set("errors", Json("replace"));
  }
  // Byte-level BPE decodes to the exact text; transformers' clean-up would
  // drop the space before "." or "'s".
  config.set("clean_up_tokenization_spaces", Json(false));
  for (const auto& [key, value] : specials.members()) config.set(key, value);
  replace_file_atomically((dir / "tokenizer_config.json").string(), config.dump(2) + "\n");
  replace_file_atomically((dir / "special_tokens_map.json").string(), specials.dump(2) + "\n");
}

}  // namespace trainer::engine::checkpoint
