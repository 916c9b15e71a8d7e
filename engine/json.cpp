// Strict JSON: the Json value, its writer, and the JsonReader cursor that parses it.
#include "engine/json.h"

#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <cmath>
#include <stdexcept>
#include <unordered_set>

#include "kernels/error.h"

namespace trainer::engine {

namespace {

// 2^53: beyond it a double no longer holds every integer.
constexpr double kMaxExactInt = 9007199254740992.0;

bool is_exact_int(double v) { return v == std::floor(v) && std::fabs(v) <= kMaxExactInt; }

const char* kind_name(Json::Kind k) {
  switch (k) {
    case Json::Kind::null: return "null";
    case Json::Kind::boolean: return "a boolean";
    case Json::Kind::number: return "a number";
    case Json::Kind::string: return "a string";
    case Json::Kind::array: return "an array";
    case Json::Kind::object: return "an object";
  }
  return "?";
}

void expect_kind(Json::Kind have, Json::Kind want) {
  if (have != want)
    throw std::runtime_error(fmt::format("expected {}, found {}", kind_name(want), kind_name(have)));
}


bool is_digit(char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }

}  // namespace

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// ---- JsonReader ----

void JsonReader::fail(std::string_view what) const {
  throw InputError(fmt::format("{}: bad JSON at byte offset {}: {}", name_, pos_, what));
}

void JsonReader::ws() {
  while (pos_ < s_.size() &&
         (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r'))
    ++pos_;
}

bool JsonReader::peek(char c) {
  ws();
  return pos_ < s_.size() && s_[pos_] == c;
}

bool JsonReader::eat(char c) {
  if (!peek(c)) return false;
  ++pos_;
  return true;
}

void JsonReader::expect(char c, std::string_view what) {
  if (!eat(c)) fail(fmt::format("expected {}", what));
}

void JsonReader::expect_end() {
  ws();
  if (pos_ != s_.size()) fail("unexpected text after the value");
}

void JsonReader::literal(std::string_view word) {
  if (s_.substr(pos_, word.size()) != word) fail(fmt::format("expected '{}'", word));
  pos_ += word.size();
}

uint32_t JsonReader::hex4() {
  if (pos_ + 4 > s_.size()) fail("expected 4 hex digits after \\u");
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) {
    const char c = s_[pos_];
    v <<= 4;
    if (c >= '0' && c <= '9') v |= c - '0';
    else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
    else fail("expected a hex digit in the \\u escape");
    ++pos_;
  }
  return v;
}

void JsonReader::string(std::string& out) {
  expect('"', "a string");
  out.clear();
  for (;;) {
    // Plain runs are copied whole: vocabularies and JSONL text are mostly unescaped.
    size_t run = pos_;
    while (run < s_.size() && s_[run] != '"' && s_[run] != '\\' &&
           static_cast<unsigned char>(s_[run]) >= 0x20)
      ++run;
    out.append(s_.data() + pos_, run - pos_);
    pos_ = run;
    if (pos_ >= s_.size()) fail("expected a closing quote");
    const char c = s_[pos_];
    if (c == '"') {
      ++pos_;
      return;
    }
    if (c != '\\') fail("control character in a string (expected it escaped)");
    if (++pos_ >= s_.size()) fail("expected an escape character");
    const char e = s_[pos_++];
    switch (e) {
      case '"': out += '"'; break;
      case '\\': out += '\\'; break;
      case '/': out += '/'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'u': {
        uint32_t cp = hex4();
        if (cp >= 0xD800 && cp < 0xDC00) {
          if (s_.substr(pos_, 2) != "\\u") fail("unpaired surrogate (expected a low surrogate \\u)");
          pos_ += 2;
          const uint32_t lo = hex4();
          if (lo < 0xDC00 || lo >= 0xE000) fail("bad low surrogate");
          cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        } else if (cp >= 0xDC00 && cp < 0xE000) {
          fail("unpaired low surrogate");
        }
        append_utf8(out, cp);
        break;
      }
      default:
        --pos_;
        fail("expected a valid escape (\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u)");
    }
  }
}

double JsonReader::number() {
  ws();
  const size_t start = pos_;
  auto digits = [&] {
    while (pos_ < s_.size() && is_digit(s_[pos_])) ++pos_;
  };
  if (pos_ < s_.size() && s_[pos_] == '-') ++pos_;
  if (pos_ < s_.size() && s_[pos_] == '0') {
    ++pos_;
  } else if (pos_ < s_.size() && s_[pos_] >= '1' && s_[pos_] <= '9') {
    digits();
  } else {
    fail("expected a number");
  }
  if (pos_ < s_.size() && s_[pos_] == '.') {
    ++pos_;
    if (pos_ >= s_.size() || !is_digit(s_[pos_])) fail("bad number: digit expected after '.'");
    digits();
  }
  if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
    ++pos_;
    if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
    if (pos_ >= s_.size() || !is_digit(s_[pos_])) fail("bad number: digit expected in exponent");
    digits();
  }
  double v = 0;
  const auto r = std::from_chars(s_.data() + start, s_.data() + pos_, v);
  if (r.ec != std::errc() || r.ptr != s_.data() + pos_) fail("number out of range");
  return v;
}

int64_t JsonReader::integer() {
  ws();
  const size_t start = pos_;
  const double v = number();
  if (!is_exact_int(v)) {
    const std::string text(s_.substr(start, pos_ - start));
    pos_ = start;
    fail(fmt::format("expected an integer of at most 2^53, found {}", text));
  }
  return static_cast<int64_t>(v);
}

Json JsonReader::value() { return value(0, true); }

void JsonReader::skip_value() { value(0, false); }

Json JsonReader::value(int depth, bool build) {
  if (depth > 64) fail("nested too deeply");
  ws();
  if (pos_ >= s_.size()) fail("unexpected end of text (expected a value)");
  const char c = s_[pos_];
  if (c == '{') {
    ++pos_;
    Json obj = build ? Json::object() : Json();
    if (eat('}')) return obj;
    std::string key;
    // Duplicates found by hash: a tokenizer.json's vocabulary has 10^5 keys.
    std::unordered_set<std::string> seen;
    for (;;) {
      if (!peek('"')) fail("expected a string key");
      string(key);
      expect(':', "':'");
      if (build) {
        if (!seen.insert(key).second) fail(fmt::format("duplicate key \"{}\"", key));
        obj.append(key, value(depth + 1, true));
      } else {
        value(depth + 1, false);
      }
      if (eat('}')) return obj;
      expect(',', "',' or '}'");
    }
  }
  if (c == '[') {
    ++pos_;
    Json arr = build ? Json::array() : Json();
    if (eat(']')) return arr;
    for (;;) {
      Json item = value(depth + 1, build);
      if (build) arr.push(std::move(item));
      if (eat(']')) return arr;
      expect(',', "',' or ']'");
    }
  }
  if (c == '"') {
    std::string s;
    string(s);
    return build ? Json(std::move(s)) : Json();
  }
  if (c == 't') { literal("true"); return Json(true); }
  if (c == 'f') { literal("false"); return Json(false); }
  if (c == 'n') { literal("null"); return Json(); }
  if (c == '-' || is_digit(c)) return Json(number());
  fail(fmt::format("unexpected character '{}' (expected a value)", c));
}

Json parse_json(std::string_view text, const std::string& name) {
  JsonReader r(text, name);
  Json v = r.value();
  r.expect_end();
  return v;
}

// ---- Json ----

bool Json::as_bool() const { expect_kind(kind_, Kind::boolean); return bool_; }
double Json::as_number() const { expect_kind(kind_, Kind::number); return num_; }
int64_t Json::as_int() const {
  expect_kind(kind_, Kind::number);
  if (!is_exact_int(num_)) throw std::runtime_error(fmt::format("expected an integer, found {}", num_));
  return static_cast<int64_t>(num_);
}
const std::string& Json::as_string() const { expect_kind(kind_, Kind::string); return str_; }
const std::vector<Json>& Json::items() const { expect_kind(kind_, Kind::array); return items_; }
const std::vector<std::pair<std::string, Json>>& Json::members() const {
  expect_kind(kind_, Kind::object);
  return members_;
}

const Json* Json::find(std::string_view key) const {
  if (kind_ != Kind::object) return nullptr;
  for (const auto& [k, v] : members_)
    if (k == key) return &v;
  return nullptr;
}

const Json& Json::at(std::string_view key) const {
  expect_kind(kind_, Kind::object);
  const Json* v = find(key);
  if (!v) throw std::runtime_error(fmt::format("missing key \"{}\"", key));
  return *v;
}

Json& Json::set(std::string key, Json value) {
  expect_kind(kind_, Kind::object);
  for (auto& [k, v] : members_)
    if (k == key) {
      v = std::move(value);
      return v;
    }
  members_.emplace_back(std::move(key), std::move(value));
  return members_.back().second;
}

Json& Json::append(std::string key, Json value) {
  expect_kind(kind_, Kind::object);
  members_.emplace_back(std::move(key), std::move(value));
  return members_.back().second;
}

Json& Json::push(Json value) {
  expect_kind(kind_, Kind::array);
  items_.push_back(std::move(value));
  return items_.back();
}

std::string json_quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20)
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
        else
          out += c;
    }
  }
  return out + "\"";
}

void Json::dump_to(std::string& out, int indent, int depth) const {
  auto newline = [&](int d) {
    if (indent < 0) return;
    out += '\n';
    out.append(static_cast<size_t>(indent * d), ' ');
  };
  switch (kind_) {
    case Kind::null: out += "null"; break;
    case Kind::boolean: out += bool_ ? "true" : "false"; break;
    case Kind::number:
      TRAINER_CHECK(std::isfinite(num_), "JSON cannot hold {}", num_);
      // Integers print exactly; other numbers with the shortest text that reads back equal.
      if (num_ == std::floor(num_) && std::fabs(num_) < kMaxExactInt)
        out += fmt::format("{}{}", static_cast<int64_t>(num_), real_ ? ".0" : "");
      else
        out += fmt::format("{}", num_);
      break;
    case Kind::string: out += json_quote(str_); break;
    case Kind::array:
      out += '[';
      for (size_t i = 0; i < items_.size(); ++i) {
        if (i) out += ',';
        newline(depth + 1);
        items_[i].dump_to(out, indent, depth + 1);
      }
      if (!items_.empty()) newline(depth);
      out += ']';
      break;
    case Kind::object:
      out += '{';
      for (size_t i = 0; i < members_.size(); ++i) {
        if (i) out += ',';
        newline(depth + 1);
        out += json_quote(members_[i].first);
        out += indent < 0 ? ":" : ": ";
        members_[i].second.dump_to(out, indent, depth + 1);
      }
      if (!members_.empty()) newline(depth);
      out += '}';
      break;
  }
}

std::string Json::dump(int indent) const {
  std::string out;
  dump_to(out, indent, 0);
  return out;
}

}  // namespace trainer::engine
