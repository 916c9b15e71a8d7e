// The tensorboard.Event protobuf messages a scalar event file holds, encoded by
// hand (no protobuf library). Field numbers are those of tensorboard's
// compat/proto/event.proto and summary.proto:
//   Event         { double wall_time = 1; int64 step = 2;
//                   oneof what { string file_version = 3; Summary summary = 5; } }
//   Summary       { repeated Value value = 1; }
//   Summary.Value { string tag = 1; oneof value { float simple_value = 2; } }
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace trainer::engine::tensorboard {

// What the first record of every event file says (TensorBoard checks the "brain.Event:" prefix).
inline constexpr std::string_view kFileVersion = "brain.Event:2";

struct Scalar {
  std::string tag;
  float value = 0;
};

// Proto3 rules, as any protobuf encoder applies them: wall_time and step are
// left out when 0 (their default), simple_value is written even when 0 (a
// oneof member has presence); fields in field-number order.
std::string encode_file_version_event(double wall_time, std::string_view version = kFileVersion);
std::string encode_scalars_event(double wall_time, int64_t step, const std::vector<Scalar>& scalars);

}  // namespace trainer::engine::tensorboard
