// TFRecord framing, the container of TensorBoard event files: each record is
//   uint64 length (little-endian) | uint32 masked crc32c(length bytes)
//   | data | uint32 masked crc32c(data)
// with masked(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace trainer::engine::tensorboard {

// TensorFlow masks the stored CRCs because a CRC over bytes that themselves
// hold CRCs is degenerate; the rotation and offset break that.
uint32_t masked_crc32c(std::string_view bytes);

// data framed as one record, ready to append to the file.
std::string tfrecord_frame(std::string_view data);

}  // namespace trainer::engine::tensorboard
