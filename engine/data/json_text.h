// The JSON this pipeline reads: a flat {"string": integer} object (a GPT-2/HF
// vocabulary) and one string field of a JSONL record, read in one pass with
// engine/json.h's strict JsonReader (strings decoded to UTF-8, surrogate pairs
// included; errors give the byte offset).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace trainer::engine::data {

// Parses a flat object of string keys and integer values. `name` (the file)
// prefixes the InputError message, which gives the byte offset of the problem.
std::vector<std::pair<std::string, int64_t>> parse_string_int_object(std::string_view json,
                                                                     const std::string& name);

// Finds top-level key `field` of the JSON object on one line and decodes its
// string value into out. Returns false when the line has no such key; throws
// InputError (naming `where`) when the line is not a JSON object or the value
// is not a string.
bool extract_string_field(std::string_view line, std::string_view field, std::string& out,
                          const std::string& where);

}  // namespace trainer::engine::data
