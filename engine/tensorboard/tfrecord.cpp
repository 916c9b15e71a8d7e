#include "engine/tensorboard/tfrecord.h"

#include "engine/tensorboard/crc32c.h"
#include "engine/tensorboard/little_endian.h"

namespace trainer::engine::tensorboard {

uint32_t masked_crc32c(std::string_view bytes) {
  uint32_t crc = crc32c(bytes);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string tfrecord_frame(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 16);
  append_le(out, data.size(), 8);
  append_le(out, masked_crc32c(std::string_view(out).substr(0, 8)), 4);
  out.append(data);
  append_le(out, masked_crc32c(data), 4);
  return out;
}

}  // namespace trainer::engine::tensorboard
