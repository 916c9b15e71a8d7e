// The tokenizer files of a Hugging Face export, so AutoTokenizer and vLLM
// load the export directory as it is, tokenizer included: GPT2Tokenizer's
// vocab.json and merges.txt (trainer export --vocab --merges), or a
// tokenizer.json as PreTrainedTokenizerFast reads it (--tokenizer, e.g.
// Llama 3's or Llama 2's), each with its tokenizer_config.json and
// special_tokens_map.json.
#pragma once

#include <string>

#include "model/model_config.h"

namespace trainer::engine::checkpoint {

class HfTokenizerExport {
 public:
  // Reads and checks the files with this trainer's own tokenizer before
  // anything is written: they must parse, and their ids must fit in
  // model.vocab_size. Bad files are an InputError naming the file.
  static HfTokenizerExport gpt2_files(const std::string& vocab_path, const std::string& merges_path,
                                      const model::ModelConfig& cfg);
  static HfTokenizerExport tokenizer_json(const std::string& path, const model::ModelConfig& cfg);

  // For config.json: the end-of-text id (<|endoftext|>, <|end_of_text|>) and
  // the begin id (Llama 3's <|begin_of_text|>; GPT-2's is <|endoftext|>), -1 when none.
  int eos_id() const { return eos_id_; }
  int bos_id() const { return bos_id_; }

  // out_dir/{vocab.json, merges.txt | tokenizer.json}, tokenizer_config.json,
  // special_tokens_map.json, each atomically.
  void write(const std::string& out_dir) const;

 private:
  HfTokenizerExport() = default;
  std::string vocab_, merges_, tokenizer_json_;
  std::string bos_, eos_, unk_;  // the tokens' text
  int eos_id_ = -1, bos_id_ = -1;
  int max_seq_len_ = 0;
};

}  // namespace trainer::engine::checkpoint
