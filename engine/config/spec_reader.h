// SpecReader: typed, located reads of job-spec YAML nodes. Every failure is an
// InputError of one line, "WHERE: key.path: reason", where WHERE is FILE:LINE
// for a value from the file and "--set" for a value from a command-line override.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace trainer::engine::spec {

// The tree of valid keys: sections, their keys, and model.moe's keys.
struct KeyNode {
  std::string name;
  std::vector<KeyNode> children;  // empty for a leaf (any value, checked when read)
  const KeyNode* child(const std::string& key) const;
  bool is_section() const { return !children.empty(); }
};
const KeyNode& key_tree();

// Edit distance, for "did you mean" hints.
int levenshtein(const std::string& a, const std::string& b);
// " (did you mean 'x.y'?)" for the closest key of `parent`, or for the same key
// in another section; "" when nothing is close.
std::string did_you_mean(const KeyNode& parent, const std::string& parent_path,
                         const std::string& key);

// A finite decimal number, the whole string (no hex floats, no inf/nan).
bool parse_double(const std::string& s, double& out);

// Where YAML text comes from: a file (errors say FILE:LINE:COL) or one --set
// value (errors name the override alone: its value is one short line).
enum class YamlSource { file, set_value };
// The one YAML document of a job spec's text. InputError "FILE:LINE:COL: ..."
// for text that is not UTF-8 or holds a control character YAML excludes (NUL,
// ...: checked before yaml-cpp, which misreads such bytes as UTF-16/32), a
// second document, a syntax error or a stray token.
YAML::Node load_yaml_document(const std::string& text, const std::string& source_name,
                              YamlSource source = YamlSource::file);

// "a scalar 'x'", "null", "a list", "a map": how a wrong value is named in errors.
std::string describe(const YAML::Node& node);

class SpecReader {
 public:
  explicit SpecReader(std::string source) : source_(std::move(source)) {}

  const std::string& source() const { return source_; }
  void add_override(const std::string& path) { overridden_.push_back(path); }

  // FILE:LINE, FILE, or --set (when `path` or one of its parents was overridden).
  std::string where(const std::string& path, const YAML::Mark& mark) const;
  // Where a key that was read earlier came from (FILE when it was defaulted).
  std::string where(const std::string& path) const;

  // Blames the line recorded for key `path`, else `mark` (a list item, say).
  [[noreturn]] void fail(const std::string& path, const YAML::Mark& mark,
                         const std::string& reason) const;
  // For cross-field checks: the line recorded for `path` or its nearest parent.
  [[noreturn]] void fail(const std::string& path, const std::string& reason) const;

  // Where key `path` is written; errors about its value point at this line.
  void record(const std::string& path, const YAML::Mark& mark) { marks_[path] = mark; }

  // Typed conversions; `path` names the key in errors.
  int64_t as_int(const YAML::Node& n, const std::string& path, int64_t min, int64_t max) const;
  uint64_t as_uint64(const YAML::Node& n, const std::string& path) const;
  double as_double(const YAML::Node& n, const std::string& path) const;
  bool as_bool(const YAML::Node& n, const std::string& path) const;
  std::string as_string(const YAML::Node& n, const std::string& path) const;
  // One of `choices` (value, name); errors list every name.
  template <typename E>
  E as_choice(const YAML::Node& n, const std::string& path,
              const std::vector<std::pair<E, const char*>>& choices) const {
    const std::string s = scalar_or_fail(n, path, "one of " + choice_list(choices));
    for (const auto& [value, name] : choices)
      if (s == name) return value;
    fail(path, n.Mark(), "expected one of " + choice_list(choices) + ", got '" + s + "'");
  }

  // Range checks that blame the key at the mark recorded for `path`.
  void check_min(const std::string& path, double value, double min, bool strict = false) const;
  void check_range(const std::string& path, double value, double lo, double hi) const;

 private:
  std::string scalar_or_fail(const YAML::Node& n, const std::string& path,
                             const std::string& expected) const;
  template <typename E>
  static std::string choice_list(const std::vector<std::pair<E, const char*>>& choices) {
    std::string out;
    for (size_t i = 0; i < choices.size(); ++i) out += (i ? ", " : "") + std::string(choices[i].second);
    return out;
  }

  std::string source_;
  std::vector<std::string> overridden_;
  std::map<std::string, YAML::Mark> marks_;
};

// Reads the keys of one YAML map (a section); a key that is absent keeps the
// field's default.
class Section {
 public:
  Section(SpecReader& reader, YAML::Node node, std::string path)
      : r_(reader), node_(std::move(node)), path_(std::move(path)) {}

  bool has(const char* key) const { return node_.IsMap() && node_[key].IsDefined(); }
  YAML::Node get(const char* key) const { return node_[key]; }
  std::string path(const char* key) const { return path_ + "." + key; }
  bool is_null(const char* key) const { return has(key) && node_[key].IsNull(); }

  void read(const char* key, int& out, int64_t min = INT32_MIN, int64_t max = INT32_MAX);
  void read(const char* key, uint64_t& out);
  void read(const char* key, double& out);
  void read(const char* key, bool& out);
  void read(const char* key, std::string& out);
  // A nullable string: null -> "".
  void read_nullable(const char* key, std::string& out);
  template <typename E>
  void read(const char* key, E& out, const std::vector<std::pair<E, const char*>>& choices) {
    if (!present(key)) return;
    out = r_.as_choice(node_[key], path(key), choices);
  }

  SpecReader& reader() { return r_; }

 private:
  bool present(const char* key) const { return has(key); }
  SpecReader& r_;
  YAML::Node node_;
  std::string path_;
};

}  // namespace trainer::engine::spec
