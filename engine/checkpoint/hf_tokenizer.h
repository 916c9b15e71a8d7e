// The tokenizer files of a Hugging Face export (trainer export --vocab
// --merges): GPT2Tokenizer's vocab.json and merges.txt with its
// tokenizer_config.json and special_tokens_map.json, so AutoTokenizer and
// vLLM load the export directory as it is, tokenizer included.
#pragma once

#include <string>

#include "model/model_config.h"

namespace trainer::engine::checkpoint {

class HfTokenizerExport {
 public:
  // Reads and checks the files with this trainer's own tokenizer before
  // anything is written: they must parse, and their ids must fit in
  // model.vocab_size. Bad files are an InputError naming the file.
  HfTokenizerExport(const std::string& vocab_path, const std::string& merges_path,
                    const model::ModelConfig& cfg);

  // <|endoftext|>'s id (GPT-2's bos, eos and unk), -1 when the vocabulary has none.
  int eot_id() const { return eot_id_; }

  // out_dir/{vocab.json, merges.txt, tokenizer_config.json, special_tokens_map.json}, each atomically.
  void write(const std::string& out_dir) const;

 private:
  std::string vocab_, merges_;
  int eot_id_ = -1;
  int max_seq_len_ = 0;
};

}  // namespace trainer::engine::checkpoint
