// The vocabulary and JSONL readers of json_text.h, walking the text with engine/json.h's JsonReader.
#include "engine/data/json_text.h"

#include <fmt/format.h>

#include "engine/json.h"
#include "kernels/error.h"

namespace trainer::engine::data {

std::vector<std::pair<std::string, int64_t>> parse_string_int_object(std::string_view json,
                                                                     const std::string& name) {
  JsonReader r(json, name);
  std::vector<std::pair<std::string, int64_t>> items;
  r.expect('{', "'{' (a JSON object of token -> id)");
  if (!r.eat('}')) {
    std::string key;
    do {
      r.string(key);
      r.expect(':', "':'");
      items.emplace_back(key, r.integer());
    } while (r.eat(','));
    r.expect('}', "',' or '}'");
  }
  r.expect_end();
  return items;
}

bool extract_string_field(std::string_view line, std::string_view field, std::string& out,
                          const std::string& where) {
  JsonReader r(line, where);
  r.expect('{', "a JSON object on each line");
  bool found = false;
  if (!r.eat('}')) {
    std::string key;
    do {
      r.string(key);
      r.expect(':', "':'");
      if (!found && key == field) {
        // Valid JSON of the wrong type: not "bad JSON", but still the place.
        if (!r.peek('"'))
          throw InputError(fmt::format("{}: byte offset {}: expected a string value for \"{}\"", where,
                                       r.offset(), field));
        r.string(out);
        found = true;
      } else {
        r.skip_value();
      }
    } while (r.eat(','));
    r.expect('}', "',' or '}'");
  }
  r.expect_end();
  return found;
}

}  // namespace trainer::engine::data
