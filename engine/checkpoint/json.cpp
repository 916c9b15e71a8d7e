// Strict JSON parser and writer for the checkpoint format.
#include "engine/checkpoint/json.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <stdexcept>

#include "kernels/error.h"

namespace trainer::engine::checkpoint {

namespace {

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

class Parser {
 public:
  Parser(std::string_view text, const std::string& name) : s_(text), name_(name) {}

  Json parse_document() {
    ws();
    Json v = value(0);
    ws();
    if (pos_ != s_.size()) fail("unexpected text after the value");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw InputError(fmt::format("{}: bad JSON at byte {}: {}", name_, pos_, what));
  }
  void ws() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r'))
      ++pos_;
  }
  bool eat(char c) {
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void literal(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) fail(fmt::format("expected '{}'", word));
    pos_ += word.size();
  }

  Json value(int depth) {
    if (depth > 64) fail("nested too deeply");
    if (pos_ >= s_.size()) fail("unexpected end of text");
    char c = s_[pos_];
    if (c == '{') return object(depth);
    if (c == '[') return array(depth);
    if (c == '"') return Json(string());
    if (c == 't') { literal("true"); return Json(true); }
    if (c == 'f') { literal("false"); return Json(false); }
    if (c == 'n') { literal("null"); return Json(); }
    if (c == '-' || (c >= '0' && c <= '9')) return Json(number());
    fail(fmt::format("unexpected character '{}'", c));
  }

  Json object(int depth) {
    ++pos_;
    Json obj = Json::object();
    ws();
    if (eat('}')) return obj;
    for (;;) {
      ws();
      if (pos_ >= s_.size() || s_[pos_] != '"') fail("expected a string key");
      std::string key = string();
      ws();
      if (!eat(':')) fail("expected ':'");
      ws();
      if (obj.find(key)) fail(fmt::format("duplicate key \"{}\"", key));
      obj.set(std::move(key), value(depth + 1));
      ws();
      if (eat('}')) return obj;
      if (!eat(',')) fail("expected ',' or '}'");
    }
  }

  Json array(int depth) {
    ++pos_;
    Json arr = Json::array();
    ws();
    if (eat(']')) return arr;
    for (;;) {
      ws();
      arr.push(value(depth + 1));
      ws();
      if (eat(']')) return arr;
      if (!eat(',')) fail("expected ',' or ']'");
    }
  }

  uint32_t hex4() {
    if (pos_ + 4 > s_.size()) fail("truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      char c = s_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= c - '0';
      else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
      else fail("bad hex digit in \\u escape");
    }
    return v;
  }

  std::string string() {
    ++pos_;  // opening quote
    std::string out;
    for (;;) {
      if (pos_ >= s_.size()) fail("unterminated string");
      char c = s_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= s_.size()) fail("unterminated escape");
      char e = s_[pos_++];
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
            if (!(eat('\\') && eat('u'))) fail("unpaired surrogate");
            uint32_t lo = hex4();
            if (lo < 0xDC00 || lo >= 0xE000) fail("bad low surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp < 0xE000) {
            fail("unpaired surrogate");
          }
          append_utf8(out, cp);
          break;
        }
        default: fail(fmt::format("bad escape '\\{}'", e));
      }
    }
  }

  double number() {
    size_t start = pos_;
    eat('-');
    if (eat('0')) {
    } else if (pos_ < s_.size() && s_[pos_] >= '1' && s_[pos_] <= '9') {
      while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
    } else {
      fail("bad number");
    }
    if (eat('.')) {
      if (pos_ >= s_.size() || !std::isdigit(static_cast<unsigned char>(s_[pos_])))
        fail("bad number: digit expected after '.'");
      while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      if (!eat('+')) eat('-');
      if (pos_ >= s_.size() || !std::isdigit(static_cast<unsigned char>(s_[pos_])))
        fail("bad number: digit expected in exponent");
      while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
    }
    double v = 0;
    auto r = std::from_chars(s_.data() + start, s_.data() + pos_, v);
    if (r.ec != std::errc() || r.ptr != s_.data() + pos_) fail("number out of range");
    return v;
  }

  std::string_view s_;
  const std::string& name_;
  size_t pos_ = 0;
};

}  // namespace

bool Json::as_bool() const { expect_kind(kind_, Kind::boolean); return bool_; }
double Json::as_number() const { expect_kind(kind_, Kind::number); return num_; }
int64_t Json::as_int() const {
  expect_kind(kind_, Kind::number);
  if (num_ != std::floor(num_) || std::fabs(num_) > 9007199254740992.0)
    throw std::runtime_error(fmt::format("expected an integer, found {}", num_));
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
      if (num_ == std::floor(num_) && std::fabs(num_) < 9007199254740992.0)
        out += fmt::format("{}", static_cast<int64_t>(num_));
      else
        out += fmt::format("{}", num_);
      break;
    case Kind::string: out += json_quote(str_); break;
    case Kind::array:
      out += '[';
      for (size_t i = 0; i < items_.size(); ++i) {
        if (i) out += indent < 0 ? "," : ",";
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

Json parse_json(std::string_view text, const std::string& name) {
  return Parser(text, name).parse_document();
}

}  // namespace trainer::engine::checkpoint
