// A reader of TensorBoard event files for the tests, written from the format
// specifications alone (TFRecord framing; the protobuf wire format; the field
// numbers of tensorboard's event.proto and summary.proto) and sharing no code
// with engine/tensorboard, so it can catch that writer's mistakes. Strict: a
// bad CRC, an unknown field, a wrong wire type, two members of a oneof or a
// truncated value throws std::runtime_error naming the file and offset.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace trainer::testing {

struct TfScalar {
  std::string tag;
  float value = 0;
};

struct TfEvent {
  double wall_time = 0;  // 0 when absent (proto3 default)
  int64_t step = 0;
  std::optional<std::string> file_version;
  bool has_summary = false;
  std::vector<TfScalar> scalars;  // Summary.value, in order
};

// CRC-32C computed bit by bit (no table), and TFRecord's mask of it.
uint32_t reference_crc32c(std::string_view bytes);
uint32_t reference_masked_crc32c(std::string_view bytes);

// The payloads of a TFRecord stream, both CRCs of each record checked.
std::vector<std::string> split_tfrecords(std::string_view bytes, const std::string& name);
TfEvent decode_event(std::string_view payload, const std::string& name);
std::string read_file_bytes(const std::string& path);
std::vector<TfEvent> read_event_file(const std::string& path);

}  // namespace trainer::testing
