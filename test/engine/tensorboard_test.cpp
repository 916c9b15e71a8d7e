// TensorBoard event files (log.metrics: tensorboard): CRC-32C against the
// standard vectors, the encoder against protobufjs's bytes for the same Events,
// and files read back by a reader written from the format specifications.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/tensorboard/crc32c.h"
#include "engine/tensorboard/event.h"
#include "engine/tensorboard/event_file.h"
#include "engine/tensorboard/tfrecord.h"
#include "engine/tensorboard_metrics.h"
#include "engine/trainer.h"
#include "test/common/tiny_job.h"
#include "test/engine/tfevents_reader.h"

using namespace trainer;
using namespace trainer::engine;
using namespace trainer::engine::tensorboard;
namespace fs = std::filesystem;

namespace {

std::string bytes(std::initializer_list<int> v) {
  std::string s;
  for (int b : v) s.push_back(static_cast<char>(b));
  return s;
}

std::vector<fs::path> event_files(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir)) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

TEST_CASE("crc32c gives the standard check value and the RFC 3720 vectors", "[cpu][tensorboard]") {
  std::string ascending, descending;
  for (int i = 0; i < 32; ++i) ascending.push_back(static_cast<char>(i));
  descending.assign(ascending.rbegin(), ascending.rend());
  const std::vector<std::pair<std::string, uint32_t>> vectors = {
      {"123456789", 0xE3069283u},          {"", 0x00000000u},
      {std::string(32, '\0'), 0x8A9136AAu}, {std::string(32, '\xFF'), 0x62A8AB43u},
      {ascending, 0x46DD794Eu},            {descending, 0x113FDB5Cu}};
  for (const auto& [input, crc] : vectors) {
    INFO("input of " << input.size() << " bytes");
    CHECK(crc32c(input) == crc);
    CHECK(testing::reference_crc32c(input) == crc);  // the reader's own, bit by bit
  }
}

TEST_CASE("a TFRecord frame: length, its masked CRC, data, the data's masked CRC", "[cpu][tensorboard]") {
  // Every TensorFlow event file begins with these 12 bytes: a 24-byte first
  // record (the file_version Event) and the masked CRC of that length.
  std::string data(24, 'e');
  std::string frame = tfrecord_frame(data);
  REQUIRE(frame.size() == 8 + 4 + 24 + 4);
  CHECK(frame.substr(0, 12) == bytes({0x18, 0, 0, 0, 0, 0, 0, 0, 0xa3, 0x7f, 0x4b, 0x22}));
  CHECK(frame.substr(12, 24) == data);
  uint32_t crc = crc32c(data);
  uint32_t masked = ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
  CHECK(frame.substr(36) == bytes({int(masked & 0xFF), int((masked >> 8) & 0xFF),
                                   int((masked >> 16) & 0xFF), int(masked >> 24)}));
  CHECK(testing::split_tfrecords(frame + tfrecord_frame(""), "frames") ==
        std::vector<std::string>{data, ""});
}

TEST_CASE("the encoder writes protobufjs's bytes for the same Events", "[cpu][tensorboard]") {
  // test/engine/make_tfevents_fixture.js wrote the fixture with protobufjs from
  // the .proto definitions; these are its Events.
  const std::string long_tag = "moe/" + std::string(140, 'x');
  const std::vector<std::string> ours = {
      encode_file_version_event(1700000000.25),
      encode_scalars_event(1700000001.5, 1,
                           {{"lm loss", 10.8125f},
                            {"learning-rate", 3.0517578125e-05f},
                            {"grad-norm", 4.59375f},
                            {"skipped", 0.0f},
                            {"moe-dropped", -2.5f}}),
      encode_scalars_event(1700000002.75, 300, {{"lm loss validation", 6.91162109375f}}),
      encode_scalars_event(1700000003.125, int64_t(1) << 40, {{long_tag, 0x1p100f}}),
  };
  std::string fixture = testing::read_file_bytes(TRAINER_SOURCE_DIR "/test/engine/fixtures/protobufjs.tfevents");
  std::vector<std::string> theirs = testing::split_tfrecords(fixture, "protobufjs.tfevents");
  REQUIRE(theirs.size() == ours.size());
  std::string framed;
  for (size_t i = 0; i < ours.size(); ++i) {
    INFO("event " << i);
    CHECK(ours[i] == theirs[i]);
    framed += tfrecord_frame(ours[i]);
  }
  CHECK(framed == fixture);
}

TEST_CASE("an event file reads back: the version record, then steps, tags and values",
          "[cpu][tensorboard]") {
  fs::path dir = testing::fresh_temp_dir("tensorboard_file");
  double before = wall_time_now();
  {
    EventFileWriter w(dir.string());
    w.write_scalars(1, {{"lm loss", 10.5f}, {"learning-rate", 3e-4f}});
    w.write_scalars(2, {{"lm loss", 9.25f}, {"learning-rate", 6e-4f}});
    w.write_scalars(2, {{"lm loss validation", 9.75f}});
    // Flushed per record: readable in full before the writer closes.
    std::vector<testing::TfEvent> open_events = testing::read_event_file(w.path());
    CHECK(open_events.size() == 4);
    std::string name = fs::path(w.path()).filename().string();
    CHECK(name.rfind("events.out.tfevents.", 0) == 0);
  }
  std::vector<fs::path> files = event_files(dir);
  REQUIRE(files.size() == 1);
  std::vector<testing::TfEvent> events = testing::read_event_file(files[0].string());
  REQUIRE(events.size() == 4);
  CHECK(events[0].file_version == std::string(kFileVersion));
  CHECK(events[0].step == 0);
  CHECK_FALSE(events[0].has_summary);
  CHECK(events[0].wall_time >= std::floor(before));
  const std::vector<int64_t> steps = {1, 2, 2};
  const std::vector<std::vector<std::pair<std::string, float>>> values = {
      {{"lm loss", 10.5f}, {"learning-rate", 3e-4f}},
      {{"lm loss", 9.25f}, {"learning-rate", 6e-4f}},
      {{"lm loss validation", 9.75f}}};
  for (size_t i = 0; i < steps.size(); ++i) {
    const testing::TfEvent& e = events[i + 1];
    INFO("event " << i + 1);
    CHECK_FALSE(e.file_version);
    CHECK(e.step == steps[i]);
    CHECK(e.wall_time >= events[0].wall_time);
    REQUIRE(e.scalars.size() == values[i].size());
    for (size_t j = 0; j < e.scalars.size(); ++j) {
      CHECK(e.scalars[j].tag == values[i][j].first);
      CHECK(e.scalars[j].value == values[i][j].second);
    }
  }
  fs::remove_all(dir);
}

TEST_CASE("each writer opens a new file, even within the same second (a resumed run)",
          "[cpu][tensorboard]") {
  fs::path dir = testing::fresh_temp_dir("tensorboard_resume");
  std::string first, second;
  {
    EventFileWriter a(dir.string());
    a.write_scalars(1, {{"lm loss", 1.0f}});
    first = a.path();
  }
  {
    EventFileWriter b(dir.string());
    b.write_scalars(2, {{"lm loss", 2.0f}});
    second = b.path();
  }
  CHECK(first != second);
  REQUIRE(event_files(dir).size() == 2);
  CHECK(testing::read_event_file(first).back().step == 1);
  CHECK(testing::read_event_file(second).back().step == 2);
  CHECK(testing::read_event_file(second).front().file_version == std::string(kFileVersion));
  fs::remove_all(dir);
}

TEST_CASE("the reader refuses a corrupt record and an unknown field", "[cpu][tensorboard]") {
  std::string good = tfrecord_frame(encode_scalars_event(1.5, 3, {{"lm loss", 2.0f}}));
  REQUIRE(testing::split_tfrecords(good, "good").size() == 1);
  for (size_t at : {size_t(0), size_t(9), size_t(14), good.size() - 1}) {
    std::string bad = good;
    bad[at] = static_cast<char>(bad[at] ^ 0x10);
    INFO("byte " << at << " flipped");
    CHECK_THROWS_WITH(testing::split_tfrecords(bad, "bad"), Catch::Contains("bad"));
  }
  CHECK_THROWS(testing::split_tfrecords(good.substr(0, good.size() - 2), "short"));
  // Event field 6 (log_message) is not what a scalar file holds.
  CHECK_THROWS_WITH(testing::decode_event(bytes({0x32, 0x00}), "field6"),
                    Catch::Contains("unexpected Event field 6"));
  // simple_value (field 2) as a varint instead of fixed32.
  CHECK_THROWS_WITH(testing::decode_event(bytes({0x2a, 0x04, 0x0a, 0x02, 0x10, 0x01}), "wire"),
                    Catch::Contains("wire type 0"));
}

TEST_CASE("step scalars: MoE and loss-scale tags only when the job has them", "[cpu][tensorboard]") {
  auto tags = [](const std::vector<Scalar>& scalars) {
    std::vector<std::string> t;
    for (const Scalar& s : scalars) t.push_back(s.tag);
    return t;
  };
  StepRecord r;
  r.step = 7;
  r.loss = 3.25;
  r.lr = 1e-3;
  r.grad_norm = 0.5;
  r.tokens_per_s = 1000;
  r.tflops = 0.125;
  r.mfu = 0.25;
  std::vector<Scalar> dense = tensorboard_step_scalars(r);
  CHECK(tags(dense) == std::vector<std::string>{"lm loss", "learning-rate", "grad-norm",
                                                "tokens-per-sec", "tflops", "mfu"});
  CHECK(dense[0].value == 3.25f);
  CHECK(dense[1].value == static_cast<float>(1e-3));
  CHECK(dense[5].value == 0.25f);
  r.memory_bytes = 3 << 20;  // known: Megatron's memory tag after mfu
  CHECK(tags(tensorboard_step_scalars(r))[6] == "mem-reserved-bytes");
  CHECK(tensorboard_step_scalars(r)[6].value == float(3 << 20));
  r.memory_bytes = 0;

  r.grad_norm = std::nan("");  // metrics.jsonl: null
  r.moe_aux_loss = 0.0625;
  r.moe_imbalance = 1.5;
  r.moe_dropped = 3;
  r.loss_scale = 65536;
  r.skipped = true;
  std::vector<Scalar> all = tensorboard_step_scalars(r);
  CHECK(tags(all) == std::vector<std::string>{"lm loss", "learning-rate", "tokens-per-sec", "tflops",
                                              "mfu", "load_balancing_loss", "moe-imbalance",
                                              "moe-dropped", "loss-scale", "skipped"});
  CHECK(all[5].value == 0.0625f);
  CHECK(all[6].value == 1.5f);
  CHECK(all[7].value == 3.0f);
  CHECK(all[8].value == 65536.0f);
  CHECK(all[9].value == 1.0f);
  // The sequence-wise balance loss, when the job has one, after the drops.
  r.moe_seq_aux_loss = 0.03125;
  std::vector<Scalar> seq = tensorboard_step_scalars(r);
  REQUIRE(seq.size() == all.size() + 1);
  CHECK(seq[8].tag == "seq_load_balancing_loss");
  CHECK(seq[8].value == 0.03125f);
  r.moe_seq_aux_loss = std::nan("");

  // log.timers: each phase's slowest rank's time, as Megatron's "<timer>-time".
  r.times = StepTimes{PhaseSpread{0.5, 0.75, 1, 0}, PhaseSpread{10, 20, 0, 1},
                      PhaseSpread{1, 11, 1, 0}, PhaseSpread{2, 2.5, 0, 1}};
  std::vector<Scalar> timed = tensorboard_step_scalars(r);
  REQUIRE(timed.size() == all.size() + 4);
  CHECK(timed[10].tag == "data-time");
  CHECK(timed[10].value == 0.75f);
  CHECK(timed[11].tag == "forward-backward-time");
  CHECK(timed[11].value == 20.0f);
  CHECK(timed[12].tag == "grad-sync-time");
  CHECK(timed[13].tag == "optimizer-time");
  CHECK(timed[13].value == 2.5f);
}
