// engine/json and engine/data/json_text: strict parsing of any bytes; for
// accepted text the dump round trip (dump, parse again, dump: the same bytes,
// which checkpoints' byte-reproducible headers rely on), and the one-field
// JSONL reader `trainer tokenize` uses agreeing with the full parser on the
// "text" field of an object.
#include <set>

#include "engine/data/json_text.h"
#include "engine/json.h"
#include "test/fuzz/fuzz_target.h"

using namespace trainer;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = fuzz::as_text(data, size);
  fuzz::expect_only_input_errors([&] {
    engine::Json j = engine::parse_json(text, "fuzz.json");
    for (int indent : {-1, 2}) {
      std::string once = j.dump(indent);
      std::string twice = engine::parse_json(once, "dumped").dump(indent);
      if (once != twice) fuzz::fail("dump is not stable under parse: " + once + " vs " + twice);
    }
    if (!j.is_object()) return;
    std::set<std::string> keys;
    for (const auto& [k, v] : j.members())
      if (!keys.insert(k).second) return;  // duplicate keys: which one a reader takes is its own rule
    const engine::Json* field = j.find("text");
    std::string got;
    bool found = false;
    try {
      found = engine::data::extract_string_field(text, "text", got, "fuzz.jsonl");
    } catch (const InputError&) {
      if (field && field->is_string()) fuzz::fail("the JSONL reader refuses a string field parse_json reads");
      return;
    }
    if (found != (field != nullptr)) fuzz::fail("the JSONL reader and parse_json disagree on the key");
    if (found && got != field->as_string()) fuzz::fail("the JSONL reader decodes another string");
  });
  fuzz::expect_only_input_errors([&] { (void)engine::data::parse_string_int_object(text, "vocab.json"); });
  fuzz::expect_only_input_errors([&] {
    std::string out;
    (void)engine::data::extract_string_field(text, "text", out, "fuzz.jsonl");
  });
  return 0;
}
