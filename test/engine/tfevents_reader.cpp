#include "test/engine/tfevents_reader.h"

#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace trainer::testing {
namespace {

[[noreturn]] void fail(const std::string& name, size_t offset, const std::string& what) {
  throw std::runtime_error(name + ": byte " + std::to_string(offset) + ": " + what);
}

uint64_t le(std::string_view bytes) {
  uint64_t v = 0;
  for (size_t i = bytes.size(); i-- > 0;) v = (v << 8) | static_cast<unsigned char>(bytes[i]);
  return v;
}

// A protobuf message read field by field: key = (field << 3) | wire type.
class Fields {
 public:
  Fields(std::string_view msg, std::string name) : msg_(msg), name_(std::move(name)) {}
  bool done() const { return pos_ == msg_.size(); }
  size_t offset() const { return pos_; }
  [[noreturn]] void error(const std::string& what) const { fail(name_, pos_, what); }

  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= msg_.size()) error("truncated varint");
      auto b = static_cast<unsigned char>(msg_[pos_++]);
      v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
    error("varint longer than 10 bytes");
  }
  std::string_view take(uint64_t n) {
    if (n > msg_.size() - pos_) error("value runs past the end of its message");
    std::string_view v = msg_.substr(pos_, n);
    pos_ += n;
    return v;
  }
  // The next key; throws unless its wire type is the one field `field` of this
  // message is declared with (known: the caller has checked the number).
  void expect_wire(int wire_type, int field, const char* what) {
    if (last_wire_ != wire_type)
      error("field " + std::to_string(field) + " (" + what + ") has wire type " +
            std::to_string(last_wire_) + ", expected " + std::to_string(wire_type));
  }
  int next_field() {
    uint64_t key = varint();
    last_wire_ = static_cast<int>(key & 7);
    return static_cast<int>(key >> 3);
  }

 private:
  std::string_view msg_;
  std::string name_;
  size_t pos_ = 0;
  int last_wire_ = -1;
};

TfScalar decode_value(std::string_view msg, const std::string& name) {
  Fields f(msg, name + " (Summary.Value)");
  TfScalar s;
  bool has_value = false;
  while (!f.done()) {
    switch (int field = f.next_field()) {
      case 1:
        f.expect_wire(2, field, "tag");
        s.tag = std::string(f.take(f.varint()));
        break;
      case 2: {
        f.expect_wire(5, field, "simple_value");
        if (has_value) f.error("simple_value twice");
        uint32_t bits = static_cast<uint32_t>(le(f.take(4)));
        std::memcpy(&s.value, &bits, 4);
        has_value = true;
        break;
      }
      default:
        f.error("unexpected Summary.Value field " + std::to_string(field));
    }
  }
  if (!has_value) f.error("Summary.Value without simple_value");
  return s;
}

}  // namespace

uint32_t reference_crc32c(std::string_view bytes) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char b : bytes) {
    crc ^= b;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return ~crc;
}

uint32_t reference_masked_crc32c(std::string_view bytes) {
  uint32_t crc = reference_crc32c(bytes);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::vector<std::string> split_tfrecords(std::string_view bytes, const std::string& name) {
  std::vector<std::string> records;
  size_t pos = 0;
  while (pos < bytes.size()) {
    if (bytes.size() - pos < 12) fail(name, pos, "truncated record header");
    std::string_view header = bytes.substr(pos, 8);
    if (le(bytes.substr(pos + 8, 4)) != reference_masked_crc32c(header))
      fail(name, pos + 8, "bad masked CRC of the length");
    uint64_t n = le(header);
    pos += 12;
    if (n > bytes.size() - pos || bytes.size() - pos - n < 4) fail(name, pos, "truncated record");
    std::string_view data = bytes.substr(pos, n);
    if (le(bytes.substr(pos + n, 4)) != reference_masked_crc32c(data))
      fail(name, pos + n, "bad masked CRC of the data");
    records.emplace_back(data);
    pos += n + 4;
  }
  return records;
}

TfEvent decode_event(std::string_view payload, const std::string& name) {
  Fields f(payload, name + " (Event)");
  TfEvent e;
  int what = 0;  // the oneof member seen
  auto oneof = [&](int field) {
    if (what) f.error("oneof `what` has fields " + std::to_string(what) + " and " + std::to_string(field));
    what = field;
  };
  while (!f.done()) {
    switch (int field = f.next_field()) {
      case 1: {
        f.expect_wire(1, field, "wall_time");
        uint64_t bits = le(f.take(8));
        std::memcpy(&e.wall_time, &bits, 8);
        break;
      }
      case 2:
        f.expect_wire(0, field, "step");
        e.step = static_cast<int64_t>(f.varint());
        break;
      case 3:
        f.expect_wire(2, field, "file_version");
        oneof(field);
        e.file_version = std::string(f.take(f.varint()));
        break;
      case 5: {
        f.expect_wire(2, field, "summary");
        oneof(field);
        e.has_summary = true;
        Fields summary(f.take(f.varint()), name + " (Summary)");
        while (!summary.done()) {
          int sf = summary.next_field();
          if (sf != 1) summary.error("unexpected Summary field " + std::to_string(sf));
          summary.expect_wire(2, sf, "value");
          e.scalars.push_back(decode_value(summary.take(summary.varint()), name));
        }
        break;
      }
      default:
        f.error("unexpected Event field " + std::to_string(field));
    }
  }
  return e;
}

std::string read_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<TfEvent> read_event_file(const std::string& path) {
  std::vector<TfEvent> events;
  for (const std::string& record : split_tfrecords(read_file_bytes(path), path))
    events.push_back(decode_event(record, path));
  return events;
}

}  // namespace trainer::testing
