// A job spec's text -> its one YAML document, guarded against yaml-cpp 0.7's
// failure modes (Debian 12's; found by test/fuzz/fuzz_job_spec):
// - it guesses UTF-16/32 from NUL bytes near the start and then spends minutes
//   (and GiBs) on a binary file passed by mistake (a data shard, a
//   checkpoint), and passes invalid UTF-8 through into keys and messages;
// - YAML::LoadAll never returns on a token no rule takes at the top level (a
//   stray ',': jbeder/yaml-cpp#1040, fixed upstream by #1319 in 2024): it
//   appends null documents until memory runs out.
#include <fmt/format.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/parser.h>

#include <sstream>
#include <string_view>

#include "engine/config/spec_reader.h"
#include "kernels/error.h"

namespace trainer::engine::spec {

namespace {

// Length of the UTF-8 sequence at s[i] (1-4), or 0 when it is not one
// (overlong forms, surrogates and code points above U+10FFFF included).
size_t utf8_length(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const auto cont = [&](size_t k) { return i + k < s.size() && (b(k) & 0xC0) == 0x80; };
  const unsigned char c = b(0);
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (!cont(1) || !cont(2)) return 0;
    if (c == 0xE0 && b(1) < 0xA0) return 0;  // overlong
    if (c == 0xED && b(1) >= 0xA0) return 0;  // surrogates
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (!cont(1) || !cont(2) || !cont(3)) return 0;
    if (c == 0xF0 && b(1) < 0x90) return 0;  // overlong
    if (c == 0xF4 && b(1) >= 0x90) return 0;  // above U+10FFFF
    return 4;
  }
  return 0;
}

// Refuses text that is not UTF-8 or holds a control character YAML excludes,
// naming line, column, byte offset and byte.
void check_yaml_text(std::string_view text, const std::string& source_name, YamlSource source) {
  size_t i = text.rfind("\xEF\xBB\xBF", 0) == 0 ? 3 : 0;  // a UTF-8 byte order mark
  int line = 1;
  size_t line_start = 0;
  while (i < text.size()) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    const size_t n = utf8_length(text, i);
    // YAML's printable set: TAB, LF, CR and everything from space up, but DEL.
    const bool control = n == 1 && ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7F);
    if (n == 0 || control) {
      const bool file = source == YamlSource::file;
      throw InputError(fmt::format(
          "{}{}: byte 0x{:02x} at byte offset {} {}; {}", source_name,
          file ? fmt::format(":{}:{}", line, i - line_start + 1) : std::string(), c, i,
          n == 0 ? "is not UTF-8" : "is a control character YAML does not allow",
          file ? "a job spec is YAML text (is this a data file or a checkpoint?)"
               : "a --set value is YAML text"));
    }
    if (c == '\n') {
      ++line;
      line_start = i + 1;
    }
    i += n;
  }
}

// Records where documents start; the node events themselves are not needed.
struct DocumentStarts : YAML::EventHandler {
  std::vector<YAML::Mark> starts;
  void OnDocumentStart(const YAML::Mark& mark) override { starts.push_back(mark); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

// "FILE:LINE:COL", or the --set name alone.
std::string at(const std::string& source_name, YamlSource source, const YAML::Mark& m) {
  if (m.is_null() || source == YamlSource::set_value) return source_name;
  return fmt::format("{}:{}:{}", source_name, m.line + 1, m.column + 1);
}

}  // namespace

YAML::Node load_yaml_document(const std::string& text, const std::string& source_name,
                              YamlSource source) {
  check_yaml_text(text, source_name, source);
  try {
    // At most two documents are parsed: the first, and whether anything follows it.
    std::istringstream in(text);
    YAML::Parser parser(in);
    DocumentStarts docs;
    if (parser.HandleNextDocument(docs) && parser.HandleNextDocument(docs) && docs.starts.size() >= 2) {
      const YAML::Mark& first = docs.starts[0];
      const YAML::Mark& second = docs.starts[1];
      // A second document starting where the first did: nothing was consumed.
      if (second.pos == first.pos && static_cast<size_t>(second.pos) < text.size())
        throw InputError(fmt::format("{}: unexpected '{}' (YAML syntax: no mapping, list or value "
                                     "starts with it)", at(source_name, source, second), text[second.pos]));
      throw InputError(fmt::format("{}: a second YAML document (after '---'); a job spec is one document",
                                   at(source_name, source, second)));
    }
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw InputError(fmt::format("{}: {}{}", at(source_name, source, e.mark),
                                 source == YamlSource::set_value ? "cannot parse the value: " : "",
                                 e.msg));
  }
}

}  // namespace trainer::engine::spec
