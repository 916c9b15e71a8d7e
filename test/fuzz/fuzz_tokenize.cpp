// `trainer tokenize` (engine/data/tokenize_corpus): any text file, or JSONL,
// becomes a Megatron dataset or is refused with one line. For text, the
// dataset's one sequence equals GPT-2's encode of the whole file followed by
// <|endoftext|>, whatever work-item size and thread count cut the file into
// pieces (the safe cuts must never change the tokens).
//
// Input: byte 0 bit 0 = JSONL (else text), bit 1 = two threads, bits 2-4 =
// work items of 16 << k bytes; the rest is the file.
#include <filesystem>

#include "engine/data/mapped_file.h"
#include "engine/data/megatron_format.h"
#include "engine/data/tokenize_corpus.h"
#include "test/fuzz/tokenizer_checks.h"

using namespace trainer;
using namespace trainer::engine::data;
namespace fs = std::filesystem;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Tokenizer& gpt2 = fuzz::gpt2_tokenizer();
  if (size < 1) return 0;
  const bool jsonl = data[0] & 1;
  TokenizeOptions opt;
  opt.inputs = {fuzz::write_input_file(jsonl ? "in.jsonl" : "in.txt", data + 1, size - 1)};
  const fs::path out = fuzz::write_input_file("tok", nullptr, 0) + ".d";
  fs::remove_all(out);
  fs::create_directories(out);
  opt.out_prefix = (out / "").string();
  opt.format = OutputFormat::megatron;
  opt.threads = data[0] & 2 ? 2 : 1;
  opt.item_bytes = size_t(16) << ((data[0] >> 2) & 7);
  fuzz::expect_only_input_errors([&] {
    const TokenizeResult r = tokenize_corpus(opt, gpt2);
    if (jsonl) return;
    if (r.documents != 1) fuzz::fail("a text file is one document");
    std::string prefix;
    for (const std::string& f : r.files)
      if (f.size() > 4 && f.substr(f.size() - 4) == ".idx") prefix = f.substr(0, f.size() - 4);
    if (prefix.empty()) fuzz::fail("no .idx written");
    MappedFile idx(prefix + ".idx"), bin(prefix + ".bin");
    MegatronIndex index;
    const TokenStream s = open_megatron(idx, bin, &index);
    std::vector<int32_t> got(static_cast<size_t>(s.num_tokens));
    read_tokens(s, 0, static_cast<int>(got.size()), gpt2.vocab_size(), got.data());
    std::vector<int32_t> want = gpt2.encode(fuzz::as_text(data + 1, size - 1));
    want.push_back(gpt2.eot_id());
    if (got != want) fuzz::fail("the dataset's tokens differ from encoding the whole file");
  });
  return 0;
}
