// Json and JsonReader: the one strict JSON facility of the engine (checkpoint
// headers, manifests and metadata, HF config/index files, vocabularies, JSONL
// records). Object keys keep their insertion order so written files are
// byte-reproducible.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace trainer::engine {

class Json {
 public:
  enum class Kind { null, boolean, number, string, array, object };

  Json() = default;
  Json(bool b) : kind_(Kind::boolean), bool_(b) {}
  Json(int v) : Json(static_cast<double>(v)) {}
  Json(int64_t v) : Json(static_cast<double>(v)) {}
  Json(uint64_t v) : Json(static_cast<double>(v)) {}
  Json(double v) : kind_(Kind::number), num_(v) {}
  Json(const char* s) : kind_(Kind::string), str_(s) {}
  Json(std::string s) : kind_(Kind::string), str_(std::move(s)) {}
  static Json array() { Json j; j.kind_ = Kind::array; return j; }
  // A number written with a fraction even when whole ("4.0", not "4"):
  // Python reads it as a float, which transformers 5's strict configs want
  // of a float-typed key.
  static Json real(double v) { Json j(v); j.real_ = true; return j; }
  static Json object() { Json j; j.kind_ = Kind::object; return j; }

  Kind kind() const { return kind_; }
  bool is_object() const { return kind_ == Kind::object; }
  bool is_array() const { return kind_ == Kind::array; }
  bool is_string() const { return kind_ == Kind::string; }
  bool is_number() const { return kind_ == Kind::number; }

  // Typed access; throws std::runtime_error when the kind differs (callers
  // turn it into an InputError naming their file).
  bool as_bool() const;
  double as_number() const;
  int64_t as_int() const;  // a number that is an exact integer
  const std::string& as_string() const;
  const std::vector<Json>& items() const;
  const std::vector<std::pair<std::string, Json>>& members() const;

  // Object: nullptr when absent. at() throws std::runtime_error naming the key.
  const Json* find(std::string_view key) const;
  const Json& at(std::string_view key) const;
  // Object: appends (or replaces) a member; array: appends an item.
  Json& set(std::string key, Json value);
  // Object: appends a member the caller knows is new (no search).
  Json& append(std::string key, Json value);
  Json& push(Json value);

  // Compact (indent < 0) or pretty-printed text.
  std::string dump(int indent = -1) const;

 private:
  void dump_to(std::string& out, int indent, int depth) const;

  Kind kind_ = Kind::null;
  bool bool_ = false;
  double num_ = 0;
  bool real_ = false;  // real(): a whole number keeps its ".0"
  std::string str_;
  std::vector<Json> items_;
  std::vector<std::pair<std::string, Json>> members_;
};

// A strict RFC 8259 cursor over one text, for readers that walk a document
// without building it (a 50k-entry vocabulary, one field of each JSONL line).
// Every error is an InputError "<name>: bad JSON at byte offset <pos>: <what>".
// Whitespace before a token is skipped by each call.
class JsonReader {
 public:
  JsonReader(std::string_view text, std::string name) : s_(text), name_(std::move(name)) {}

  [[noreturn]] void fail(std::string_view what) const;
  size_t offset() const { return pos_; }

  // True (and consumed) when the next token is c.
  bool eat(char c);
  // True when the next token is c; consumes nothing.
  bool peek(char c);
  // Consumes c or fails with "expected <what>".
  void expect(char c, std::string_view what);
  // Fails unless only whitespace is left.
  void expect_end();

  void string(std::string& out);  // a string, decoded to UTF-8
  double number();
  int64_t integer();  // a number that is an exact integer (|v| <= 2^53)
  Json value();       // any value, built
  void skip_value();  // any value, checked and dropped

 private:
  void ws();
  void literal(std::string_view word);
  uint32_t hex4();
  Json value(int depth, bool build);

  std::string_view s_;
  std::string name_;
  size_t pos_ = 0;
};

// Strict parse of the whole text (duplicate object keys refused). Throws the
// InputError of JsonReader.
Json parse_json(std::string_view text, const std::string& name);

// The JSON string literal of s (quotes and escapes included).
std::string json_quote(std::string_view s);

// Appends code point cp (at most U+10FFFF) to out as UTF-8.
void append_utf8(std::string& out, uint32_t cp);

}  // namespace trainer::engine
