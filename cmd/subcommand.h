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

}  // namespace trainer::cmd
