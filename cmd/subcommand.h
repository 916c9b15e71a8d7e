// Subcommand registry: each cmd/<name>.cpp registers itself with a static
// Registrar, so adding a subcommand never edits main.cpp.
#pragma once

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

namespace trainer::cmd {

// setup() adds the subcommand's options to `sub` and returns the function that
// runs it (returning the process exit code).
using Setup = std::function<std::function<int()>(CLI::App& sub)>;

struct Subcommand {
  std::string name;
  std::string help;
  Setup setup;
};

std::vector<Subcommand>& subcommands();

struct Registrar {
  Registrar(std::string name, std::string help, Setup setup) {
    subcommands().push_back({std::move(name), std::move(help), std::move(setup)});
  }
};

// The positional SOURCE of the commands that read a trained model (export,
// sample): what they accept is the checkpoint loader's, so the help is one text.
inline void add_checkpoint_source(CLI::App& sub, std::string& source) {
  sub.add_option("source", source,
                 "a run directory, a checkpoint directory, or one step_* directory "
                 "(the newest intact checkpoint is used)")
      ->required();
}

// A whole number in lo..hi, checked before CLI11 converts it: CLI11's own
// range check prints its bounds as doubles ("0 not in range 0.000000 to
// 1797...") and lets "-1" wrap into an unsigned option.
inline CLI::Validator whole_number(uint64_t lo, uint64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& s) -> std::string {
        // Digits only: strtoull would accept a sign, spaces and trailing text.
        const bool digits = !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
        errno = 0;
        const unsigned long long v = digits ? std::strtoull(s.c_str(), nullptr, 10) : 0;
        if (!digits || errno == ERANGE || v < lo || v > hi)
          return fmt::format("expected a whole number in {}..{}, got '{}'", lo, hi, s);
        return std::string();
      },
      fmt::format("{}..{}", lo, hi));
}

}  // namespace trainer::cmd
