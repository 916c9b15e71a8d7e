// What the checkpoint tests share: the tiny job in a directory, a save and a
// resume through a Checkpointer of their own (single rank, the warning
// stream captured), and reading a file whole.
#pragma once

#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "engine/checkpoint/checkpoint.h"
#include "engine/trainer.h"
#include "parallel/communicator.h"
#include "test/common/tiny_job.h"

namespace trainer::testing {

inline engine::JobSpec tiny_spec_in(const std::filesystem::path& dir,
                                    engine::Family family = engine::Family::gpt2) {
  engine::JobSpec s = tiny_job(family, 9);
  s.run.dir = dir.string();
  s.checkpoint.keep = 10;
  return s;
}

// Runs `use` on a single-rank Checkpointer whose warnings go to a temporary
// file; appends them to *warnings (when given), also if `use` throws.
inline void with_checkpointer(const engine::JobSpec& spec, std::string* warnings,
                              const std::function<void(engine::checkpoint::Checkpointer&)>& use) {
  auto world = parallel::make_single_communicator("world");
  FILE* warn = std::tmpfile();
  auto collect = [&] {
    std::rewind(warn);
    char buf[1024];
    while (warnings && std::fgets(buf, sizeof buf, warn)) *warnings += buf;
    std::fclose(warn);
  };
  try {
    engine::checkpoint::Checkpointer c(spec, *world, trainer::Device::cpu, {}, warn);
    use(c);
  } catch (...) {
    collect();
    throw;
  }
  collect();
}

inline void save(engine::Trainer& t, const engine::JobSpec& spec, int step,
                 std::string* warnings = nullptr) {
  with_checkpointer(spec, warnings, [&](engine::checkpoint::Checkpointer& c) {
    c.save(step, t.model().buffers(), t.optimizer());
  });
}

// Resumes a trainer built without a run directory; returns the step.
inline int resume(engine::Trainer& t, const engine::JobSpec& spec, std::string* warnings = nullptr) {
  int step = 0;
  with_checkpointer(spec, warnings, [&](engine::checkpoint::Checkpointer& c) {
    step = c.resume(t.model().buffers(), t.optimizer());
  });
  return step;
}

// A fresh tiny run of `spec` trained step by step, saved after each step in
// `saves` (ascending).
inline void train_and_save(const engine::JobSpec& spec, std::initializer_list<int> saves) {
  engine::Trainer t(spec, quiet_options());
  int done = 0;
  for (int step : saves) {
    if (step > done) train_losses(t, done + 1, step);
    done = std::max(done, step);
    save(t, spec, step);
  }
}

inline std::string read_all(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Files larger than `limit` bytes fail to grow (EFBIG) while it lives: a
// full disk for the saves under test. SIGXFSZ, which would kill the process
// instead, is ignored meanwhile.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t limit) {
    ::getrlimit(RLIMIT_FSIZE, &old_);
    old_handler_ = ::signal(SIGXFSZ, SIG_IGN);
    rlimit lim = old_;
    lim.rlim_cur = limit;
    ::setrlimit(RLIMIT_FSIZE, &lim);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &old_);
    ::signal(SIGXFSZ, old_handler_);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  rlimit old_{};
  sighandler_t old_handler_;
};

// The names in a directory, sorted.
inline std::vector<std::string> names_in(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace trainer::testing
