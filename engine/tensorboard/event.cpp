#include "engine/tensorboard/event.h"

#include <cstring>

#include "engine/tensorboard/little_endian.h"

namespace trainer::engine::tensorboard {
namespace {

// Protobuf wire types.
constexpr int kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5;

// Event, Summary and Summary.Value field numbers.
constexpr int kEventWallTime = 1, kEventStep = 2, kEventFileVersion = 3, kEventSummary = 5;
constexpr int kSummaryValue = 1;
constexpr int kValueTag = 1, kValueSimpleValue = 2;

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_key(std::string& out, int field, int wire_type) {
  put_varint(out, (static_cast<uint64_t>(field) << 3) | static_cast<uint64_t>(wire_type));
}

void put_bytes(std::string& out, int field, std::string_view bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out.append(bytes);
}

void put_double(std::string& out, int field, double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  put_key(out, field, kFixed64);
  append_le(out, bits, 8);
}

void put_float(std::string& out, int field, float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  put_key(out, field, kFixed32);
  append_le(out, bits, 4);
}

// An int64 is a varint of its two's complement (negative steps take 10 bytes).
void put_int64(std::string& out, int field, int64_t v) {
  put_key(out, field, kVarint);
  put_varint(out, static_cast<uint64_t>(v));
}

std::string event_header(double wall_time, int64_t step) {
  std::string out;
  if (wall_time != 0) put_double(out, kEventWallTime, wall_time);
  if (step != 0) put_int64(out, kEventStep, step);
  return out;
}

}  // namespace

std::string encode_file_version_event(double wall_time, std::string_view version) {
  std::string out = event_header(wall_time, 0);
  put_bytes(out, kEventFileVersion, version);
  return out;
}

std::string encode_scalars_event(double wall_time, int64_t step, const std::vector<Scalar>& scalars) {
  std::string summary, value;
  for (const Scalar& s : scalars) {
    value.clear();
    if (!s.tag.empty()) put_bytes(value, kValueTag, s.tag);
    put_float(value, kValueSimpleValue, s.value);
    put_bytes(summary, kSummaryValue, value);
  }
  std::string out = event_header(wall_time, step);
  put_bytes(out, kEventSummary, summary);
  return out;
}

}  // namespace trainer::engine::tensorboard
