// The one error type of the project and the macros that raise it.
//
// Two kinds: InputError is the user's fault (bad YAML, bad data file, bad
// checkpoint, impossible mesh) and ends the process with exit code 2;
// Error is a runtime failure (a failed CUDA/NCCL/MPI call, a broken
// invariant) and exits 1. Library code only throws; cmd/main.cpp is the one
// place that catches, prints one line, and picks the exit code.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace trainer {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// A problem with what the user gave us. The message is the whole line the
// user sees: it names the file, key or offset, and what was expected.
class InputError : public Error {
 public:
  explicit InputError(const std::string& what) : Error(what) {}
};

// The rank prefixed to runtime errors; set once by the mesh at start-up.
int& error_rank();

[[noreturn]] void throw_check_failure(const char* expr, const char* file, int line,
                                      const std::string& message);

}  // namespace trainer

// A broken invariant or failed runtime call: Error with expression, file:line, rank.
#define TRAINER_CHECK(cond, ...)                                                    \
  do {                                                                              \
    if (!(cond)) ::trainer::throw_check_failure(#cond, __FILE__, __LINE__,          \
                                                ::fmt::format(__VA_ARGS__));        \
  } while (0)

// Bad user input: InputError carrying exactly the formatted message.
#define TRAINER_INPUT_CHECK(cond, ...)                                              \
  do {                                                                              \
    if (!(cond)) throw ::trainer::InputError(::fmt::format(__VA_ARGS__));           \
  } while (0)
