// CRC-32C (Castagnoli), the checksum TFRecord framing puts around every record.
#pragma once

#include <cstdint>
#include <string_view>

namespace trainer::engine::tensorboard {

// The standard CRC-32C of bytes: reflected polynomial 0x82F63B78, initial value
// and final xor 0xFFFFFFFF ("123456789" -> 0xE3069283).
uint32_t crc32c(std::string_view bytes);

}  // namespace trainer::engine::tensorboard
