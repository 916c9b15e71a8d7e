// Subcommand registry: each cmd/<name>.cpp registers itself with a static
// Registrar, so adding a subcommand never edits main.cpp.
#pragma once

#include <CLI/CLI.hpp>

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

}  // namespace trainer::cmd
