// A small JSON reader for vocabularies and JSONL text fields (see json_text.h).
#include "engine/data/json_text.h"

#include <cstring>

#include "kernels/error.h"

namespace trainer::engine::data {
namespace {

struct Reader {
  std::string_view s;
  size_t pos = 0;
  const std::string& name;

  [[noreturn]] void fail(const char* expected) const {
    throw InputError(fmt::format("{}: byte offset {}: expected {}", name, pos, expected));
  }
  void skip_ws() {
    while (pos < s.size() && (s[pos] == ' ' || s[pos] == '\t' || s[pos] == '\n' || s[pos] == '\r'))
      ++pos;
  }
  bool peek(char c) {
    skip_ws();
    return pos < s.size() && s[pos] == c;
  }
  void expect(char c, const char* what) {
    if (!peek(c)) fail(what);
    ++pos;
  }
  static void put_utf8(std::string& out, uint32_t cp) {
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
  uint32_t hex4() {
    if (pos + 4 > s.size()) fail("4 hex digits after \\u");
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      char c = s[pos++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= c - '0';
      else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
      else { --pos; fail("a hex digit"); }
    }
    return v;
  }
  void string(std::string& out) {
    expect('"', "a string");
    out.clear();
    while (true) {
      size_t run = pos;
      while (run < s.size() && s[run] != '"' && s[run] != '\\') ++run;
      out.append(s.data() + pos, run - pos);
      pos = run;
      if (pos >= s.size()) fail("a closing quote");
      if (s[pos++] == '"') return;
      if (pos >= s.size()) fail("an escape character");
      char e = s[pos++];
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
          if (cp >= 0xD800 && cp < 0xDC00 && pos + 6 <= s.size() && s[pos] == '\\' &&
              s[pos + 1] == 'u') {
            size_t save = pos;
            pos += 2;
            uint32_t lo = hex4();
            if (lo >= 0xDC00 && lo < 0xE000) cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            else pos = save;
          }
          put_utf8(out, cp);
          break;
        }
        default: --pos; fail("a valid escape (\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u)");
      }
    }
  }
  int64_t integer() {
    skip_ws();
    size_t start = pos;
    if (pos < s.size() && s[pos] == '-') ++pos;
    while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9') ++pos;
    if (pos == start || (pos == start + 1 && s[start] == '-') || pos - start > 18) fail("an integer of at most 18 digits");
    return std::stoll(std::string(s.substr(start, pos - start)));
  }
  // Skips any JSON value (used for the fields of a JSONL record we do not read).
  void skip_value() {
    skip_ws();
    if (pos >= s.size()) fail("a value");
    char c = s[pos];
    if (c == '"') {
      std::string tmp;
      string(tmp);
    } else if (c == '{' || c == '[') {
      char close = c == '{' ? '}' : ']';
      ++pos;
      if (peek(close)) { ++pos; return; }
      while (true) {
        if (close == '}') {
          std::string key;
          string(key);
          expect(':', "':'");
        }
        skip_value();
        if (peek(',')) { ++pos; continue; }
        expect(close, close == '}' ? "',' or '}'" : "',' or ']'");
        return;
      }
    } else {
      size_t start = pos;
      while (pos < s.size() && std::strchr(",}] \t\r\n", s[pos]) == nullptr) ++pos;
      if (pos == start) fail("a value");
    }
  }
};

}  // namespace

std::vector<std::pair<std::string, int64_t>> parse_string_int_object(std::string_view json,
                                                                     const std::string& name) {
  Reader r{json, 0, name};
  std::vector<std::pair<std::string, int64_t>> items;
  r.expect('{', "'{' (a JSON object of token -> id)");
  if (r.peek('}')) return items;
  std::string key;
  while (true) {
    r.string(key);
    r.expect(':', "':'");
    int64_t v = r.integer();
    items.emplace_back(key, v);
    if (r.peek(',')) { ++r.pos; continue; }
    r.expect('}', "',' or '}'");
    break;
  }
  return items;
}

bool extract_string_field(std::string_view line, std::string_view field, std::string& out,
                          const std::string& where) {
  Reader r{line, 0, where};
  r.expect('{', "a JSON object on each line");
  if (r.peek('}')) return false;
  std::string key;
  bool found = false;
  while (true) {
    r.string(key);
    r.expect(':', "':'");
    if (!found && key == field) {
      if (!r.peek('"')) r.fail(fmt::format("a string value for \"{}\"", field).c_str());
      r.string(out);
      found = true;
    } else {
      r.skip_value();
    }
    if (r.peek(',')) { ++r.pos; continue; }
    r.expect('}', "',' or '}'");
    return found;
  }
}

}  // namespace trainer::engine::data
