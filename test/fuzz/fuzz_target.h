// What every fuzz target checks: any input either works or is refused with
// InputError (the one line and exit code 2 the user sees). Anything else that
// escapes (a TRAINER_CHECK's Error, a std::out_of_range, bad_alloc from a size
// read off the input) is a finding and aborts, as do the sanitizers' reports.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>
#include <typeinfo>

#include "kernels/error.h"

namespace trainer::fuzz {

template <class F>
void expect_only_input_errors(F&& run) {
  try {
    run();
  } catch (const InputError& e) {
    // FUZZ_VERBOSE=1 shows the refusals, to check that seeds reach the paths past them.
    static const bool verbose = std::getenv("FUZZ_VERBOSE") != nullptr;
    if (verbose) std::fprintf(stderr, "fuzz: refused: %s\n", e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz: escaped %s: %s\n", typeid(e).name(), e.what());
    std::abort();
  }
}

// A finding that is not an exception: a property of an accepted input broke.
[[noreturn]] inline void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz: %s\n", what.c_str());
  std::abort();
}

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// The readers under test take paths: each input is written to a file of this
// process's own in /dev/shm (or TMPDIR), rewritten for every input.
std::string write_input_file(const char* tag, const uint8_t* data, size_t size);
inline std::string write_input_file(const char* tag, std::string_view bytes) {
  return write_input_file(tag, reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

// How targets split one input into several files: a 2-byte little-endian
// length, then that many bytes (fewer where the input ends).
class InputCursor {
 public:
  InputCursor(const uint8_t* data, size_t size) : p_(data), left_(size) {}
  // The next length-prefixed part; empty when fewer than 2 bytes are left.
  std::string_view take_prefixed() {
    if (left_ < 2) return {};
    const size_t n = std::min<size_t>(p_[0] | p_[1] << 8, left_ - 2);
    const std::string_view out(reinterpret_cast<const char*>(p_ + 2), n);
    p_ += 2 + n;
    left_ -= 2 + n;
    return out;
  }
  std::string_view rest() const { return {reinterpret_cast<const char*>(p_), left_}; }

 private:
  const uint8_t* p_;
  size_t left_;
};

}  // namespace trainer::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
