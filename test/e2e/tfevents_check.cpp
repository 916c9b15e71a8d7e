// tfevents_check RUN_DIR FILES: passes (exit 0) when RUN_DIR/tensorboard holds
// exactly FILES event files, each a valid TFRecord stream (every CRC checked)
// of a "brain.Event:2" record and then summaries, and those summaries, read in
// file-name order, are metrics.jsonl line for line: the same steps, one Event
// per training step with a tag per field the line has, one "lm loss
// validation" Event per evaluation, every value the line's as a float.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/json.h"
#include "test/engine/tfevents_reader.h"

namespace fs = std::filesystem;
using trainer::engine::Json;
using trainer::testing::TfEvent;

namespace {

struct Field {
  const char* tag;
  bool nine_digits;  // metrics.jsonl prints it with %.9g (else 6 significant digits)
};
const std::map<std::string, Field> kFields = {
    {"loss", {"lm loss", true}},           {"lr", {"learning-rate", true}},
    {"grad_norm", {"grad-norm", true}},    {"tokens_per_s", {"tokens-per-sec", false}},
    {"tflops", {"tflops", false}},         {"mfu", {"mfu", false}},
    {"memory_bytes", {"mem-reserved-bytes", false}}, {"global_batch", {"batch-size", false}},
    {"params_norm", {"params-norm", true}},
    {"moe_aux_loss", {"load_balancing_loss", true}}, {"moe_imbalance", {"moe-imbalance", false}},
    {"moe_dropped", {"moe-dropped", false}}, {"moe_seq_aux_loss", {"seq_load_balancing_loss", true}},
    {"loss_scale", {"loss-scale", false}},
    {"skipped", {"skipped", false}},       {"val_loss", {"lm loss validation", true}}};

[[noreturn]] void fail(const std::string& what) { throw std::runtime_error(what); }

// got is the float nearest to the double metrics.jsonl printed: within half a
// float ulp of it, plus what printing it with 9 (or 6) digits may have lost.
bool same_value(double logged, float got, bool nine_digits) {
  double ulp = std::nextafter(got, std::numeric_limits<float>::infinity()) - got;
  double printed = (nine_digits ? 5e-9 : 5e-6) * std::fabs(logged);
  return std::fabs(double(got) - logged) <= 0.5 * ulp + printed;
}

void check(const Json& line, const TfEvent& e, size_t n) {
  std::string where = "metrics.jsonl line " + std::to_string(n);
  if (e.step != line.at("step").as_int())
    fail(where + ": step " + line.at("step").dump() + ", event step " + std::to_string(e.step));
  size_t i = 0;
  for (const auto& [key, value] : line.members()) {
    if (key == "step" || value.kind() == Json::Kind::null) continue;  // grad_norm null: no scalar
    auto field = kFields.find(key);
    if (field == kFields.end()) fail(where + ": no tag known for \"" + key + "\"");
    if (i >= e.scalars.size()) fail(where + ": no scalar for \"" + key + "\"");
    const auto& s = e.scalars[i++];
    double logged = value.kind() == Json::Kind::boolean ? (value.as_bool() ? 1 : 0) : value.as_number();
    if (s.tag != field->second.tag)
      fail(where + ": scalar " + std::to_string(i) + " is \"" + s.tag + "\", expected \"" +
           field->second.tag + "\"");
    if (!same_value(logged, s.value, field->second.nine_digits))
      fail(where + ": " + s.tag + " " + std::to_string(s.value) + ", metrics.jsonl " + value.dump());
  }
  if (i != e.scalars.size()) fail(where + ": event has extra scalar \"" + e.scalars[i].tag + "\"");
}

int run(const fs::path& run_dir, size_t expected_files) {
  std::vector<Json> lines;
  std::ifstream in(run_dir / "metrics.jsonl");
  if (!in) fail((run_dir / "metrics.jsonl").string() + ": cannot open");
  for (std::string text; std::getline(in, text);)
    lines.push_back(trainer::engine::JsonReader(text, "metrics.jsonl").value());

  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(run_dir / "tensorboard")) {
    if (entry.path().filename().string().rfind("events.out.tfevents.", 0) != 0)
      fail(entry.path().string() + ": not an event file");
    files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());  // <seconds>.<host>[.<n>]: the order they were written
  if (files.size() != expected_files)
    fail(std::to_string(files.size()) + " event files, expected " + std::to_string(expected_files));

  std::vector<TfEvent> summaries;
  for (const fs::path& file : files) {
    std::vector<TfEvent> events = trainer::testing::read_event_file(file.string());
    if (events.empty() || events[0].file_version != std::string("brain.Event:2") || events[0].has_summary)
      fail(file.string() + ": the first record is not file_version \"brain.Event:2\"");
    for (size_t i = 1; i < events.size(); ++i) {
      if (events[i].file_version || !events[i].has_summary)
        fail(file.string() + ": record " + std::to_string(i) + " is not a summary");
      summaries.push_back(events[i]);
    }
  }
  if (summaries.size() != lines.size())
    fail(std::to_string(summaries.size()) + " summaries, metrics.jsonl has " +
         std::to_string(lines.size()) + " lines");
  size_t steps = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    check(lines[i], summaries[i], i + 1);
    steps += lines[i].find("loss") != nullptr;
  }
  std::printf("event files: %zu; %zu training steps and %zu evaluations equal metrics.jsonl\n",
              files.size(), steps, lines.size() - steps);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: tfevents_check RUN_DIR FILES\n");
    return 2;
  }
  try {
    return run(argv[1], std::stoul(argv[2]));
  } catch (const std::exception& e) {
    std::printf("FAIL: %s\n", e.what());
    return 1;
  }
}
