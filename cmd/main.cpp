// trainer: the one binary. Parses the command line, runs a subcommand, and is
// the only place that turns errors into a printed line and an exit code:
// 2 for bad input (InputError, bad arguments), 1 for runtime failures.
#include <fmt/format.h>

#include <cstdio>
#include <exception>
#include <map>
#include <new>

#include "cmd/subcommand.h"
#include "cmd/version.h"
#include "kernels/error.h"

namespace trainer::cmd {
std::vector<Subcommand>& subcommands() {
  static std::vector<Subcommand> list;
  return list;
}
}  // namespace trainer::cmd

int main(int argc, char** argv) {
  using namespace trainer;
  CLI::App app{"trainer: pretrain transformer and MoE language models from a YAML job spec"};
  app.require_subcommand(0, 1);
  bool show_version = false;
  app.add_flag("--version", show_version, "print version, build and library information");

  std::map<CLI::App*, std::function<int()>> runners;
  for (auto& sc : cmd::subcommands()) {
    CLI::App* sub = app.add_subcommand(sc.name, sc.help);
    runners[sub] = sc.setup(*sub);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "trainer: %s\n", e.what());
    return 2;
  }
  try {
    if (show_version) {
      cmd::print_version();
      return 0;
    }
    for (auto& [sub, run] : runners)
      if (sub->parsed()) return run();
    std::fputs(app.help().c_str(), stdout);
    return 2;
  } catch (const InputError& e) {
    std::fprintf(stderr, "trainer: error: %s\n", e.what());
    return 2;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "trainer: failed: out of host memory (std::bad_alloc)\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trainer: failed: %s\n", e.what());
    return 1;
  }
}
