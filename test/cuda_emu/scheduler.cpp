// The emulator's launches: blocks in turn, each block's threads as fibers on
// the calling thread, switched by a 20-line context switch (x86-64 SysV: the
// callee-saved registers; kernels never change the rounding mode, so MXCSR
// and the x87 control word stay as the launching thread set them) instead of
// swapcontext, whose signal-mask syscall per switch would make an element-wise
// kernel over a million elements take seconds. Every collective waits for the
// threads the hardware waits for; what would hang a GPU aborts here with the
// kernel, block and threads involved.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "asan_fibers.h"
#include "cuda_runtime.h"
#include "runtime_state.h"

#if !defined(__x86_64__)
#error "the CUDA emulator's context switch is written for x86-64"
#endif

extern "C" void cuda_emu_switch(void** save_sp, void* load_sp);
extern "C" void cuda_emu_trampoline();
asm(R"(
.text
.globl cuda_emu_switch
.type cuda_emu_switch,@function
cuda_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
.size cuda_emu_switch,.-cuda_emu_switch
.globl cuda_emu_trampoline
.type cuda_emu_trampoline,@function
cuda_emu_trampoline:
  movq %r12, %rdi
  call *%r13
  ud2
.size cuda_emu_trampoline,.-cuda_emu_trampoline
.section .note.GNU-stack,"",@progbits
.text
)");

#if CUDA_EMU_ASAN
// Every binary with the emulator links this file. Fake stacks for
// use-after-return would have to follow each fiber switch (GCC 12 emits none).
// Leak checking stays on.
extern "C" const char* __asan_default_options() { return "detect_stack_use_after_return=0"; }
#endif

namespace cuda_emu {

enum class Wait { ready, block, warp, done };

struct ThreadState {
  void* sp = nullptr;
  StackRange stack;
  void* fake_stack = nullptr;  // AddressSanitizer's, while suspended
  uint3 idx{};
  int linear = 0;
  Wait wait = Wait::ready;
  const char* where = "";
  unsigned mask = 0;
  WarpOp op = WarpOp::sync;
  uint64_t value = 0, result = 0;
  int src = 0;
  uint64_t products = 0;
};

std::string fmt_lane_error(const ThreadState& t, int lane, const char* what);

namespace {

void release_block_if_complete();

// The flash tiles keep fragments on the stack; AddressSanitizer's redzones
// around every local array make frames larger.
#if CUDA_EMU_ASAN
constexpr size_t kStackBytes = 1024 * 1024;
#else
constexpr size_t kStackBytes = 256 * 1024;
#endif

struct Stack {
  unsigned char* base = nullptr;  // lowest address; its first page is a guard
};

struct Scheduler {
  std::vector<Stack> stacks;
  std::vector<ThreadState> threads;
  void* home_sp = nullptr;
  StackRange home_stack;      // the launching thread's, as AddressSanitizer knows it
  void* home_fake = nullptr;  // its fake frames while a fiber runs
  ThreadState* current = nullptr;
  BodyFn body = nullptr;
  void* closure = nullptr;
  std::string site;
  uint64_t launches = 0;
  bool running = false;
  struct SharedBlock {
    const void* site;
    void* mem;
  };
  std::vector<SharedBlock> shared_blocks;  // static __shared__ of the running block
  uint64_t block_runs = 0;
  int live = 0;        // threads of the block not yet exited
  int at_barrier = 0;  // of them, waiting at __syncthreads
  // Per warp, its lanes waiting at a warp collective: a release needs at least
  // the mask's lanes there, so only then are the 32 lanes looked at (each
  // lane's arrival checking them all was a tenth of an emulated training step).
  std::vector<int> warp_waiting;
};

thread_local Scheduler sched;

unsigned char* new_stack() {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* p = mmap(nullptr, kStackBytes + page, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  if (p == MAP_FAILED) {
    std::fprintf(stderr, "cuda emulator: cannot map a %zu-byte fiber stack\n", kStackBytes);
    std::abort();
  }
  mprotect(p, page, PROT_NONE);  // an overflow faults instead of corrupting a neighbour
  return static_cast<unsigned char*>(p);
}

extern "C" CUDA_EMU_NO_ASAN void fiber_main(ThreadState* t) {
  after_switch(nullptr, &sched.home_stack);
  sched.body(sched.closure);
  t->wait = Wait::done;
  --sched.live;
  release_block_if_complete();
  before_switch(nullptr, sched.home_stack);
  cuda_emu_switch(&t->sp, sched.home_sp);
  std::abort();  // a finished fiber is never resumed
}

void prepare(ThreadState& t, Stack& s) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  // Stack tops at equal offsets in their mappings would share cache sets and
  // evict each other at every switch: stagger them by cache lines.
  const uintptr_t stagger = static_cast<uintptr_t>(t.linear) * 64 * 7 % 32768;
  uintptr_t top = reinterpret_cast<uintptr_t>(s.base) + page + kStackBytes - stagger;
  top &= ~uintptr_t{15};
  // 7 slots: r15, r14, r13, r12, rbx, rbp, the return address. After the
  // `ret` into the trampoline rsp = top - 16, aligned for its call.
  auto* sp = reinterpret_cast<uint64_t*>(top - 72);
  sp[0] = 0;                                                 // r15
  sp[1] = 0;                                                 // r14
  sp[2] = reinterpret_cast<uint64_t>(&fiber_main);           // r13
  sp[3] = reinterpret_cast<uint64_t>(&t);                    // r12
  sp[4] = 0;                                                 // rbx
  sp[5] = 0;                                                 // rbp
  sp[6] = reinterpret_cast<uint64_t>(&cuda_emu_trampoline);  // return address
  t.sp = sp;
  t.stack = {s.base + page, kStackBytes};
  t.fake_stack = nullptr;
  t.wait = Wait::ready;
}

ThreadState& self() {
  if (!sched.current) {
    std::fprintf(stderr, "cuda emulator: a device builtin was called outside a kernel\n");
    std::abort();
  }
  return *sched.current;
}

void suspend(ThreadState& t) {
  before_switch(&t.fake_stack, sched.home_stack);
  cuda_emu_switch(&t.sp, sched.home_sp);
  after_switch(t.fake_stack, &sched.home_stack);
}

[[noreturn]] void fault(const std::string& what) {
  std::fprintf(stderr,
               "cuda emulator: kernel launched at %s, block (%u, %u, %u) of grid (%u, %u, %u), block (%u, %u, "
               "%u) threads: %s\n",
               sched.site.c_str(), tls_block.block_idx.x, tls_block.block_idx.y,
               tls_block.block_idx.z, tls_block.grid_dim.x, tls_block.grid_dim.y,
               tls_block.grid_dim.z, tls_block.block_dim.x, tls_block.block_dim.y,
               tls_block.block_dim.z, what.c_str());
  std::fflush(stderr);
  std::abort();
}

const char* wait_name(const ThreadState& t) {
  switch (t.wait) {
    case Wait::ready: return "running";
    case Wait::block: return "__syncthreads";
    case Wait::warp: return t.where;
    case Wait::done: return "exited";
  }
  return "?";
}

// Releases the group of warp lanes `mask` (warp starting at thread `first`) if
// every lane of it waits at a collective with that mask: each gets its result
// and becomes ready. Called by each arriving lane, so the last one releases.
bool try_release(int first, unsigned mask) {
  const int n = static_cast<int>(sched.threads.size());
  for (int j = 0; j < 32; ++j) {
    if (!(mask >> j & 1u)) continue;
    if (first + j >= n) return false;  // reported by deadlock()
    const ThreadState& o = sched.threads[first + j];
    if (o.wait != Wait::warp || o.mask != mask) return false;
  }
  const ThreadState& lead = sched.threads[first + __builtin_ctz(mask)];
  uint64_t ballot = 0;
  for (int j = 0; j < 32; ++j)
    if (mask >> j & 1u && sched.threads[first + j].value) ballot |= uint64_t{1} << j;
  for (int j = 0; j < 32; ++j) {
    if (!(mask >> j & 1u)) continue;
    ThreadState& o = sched.threads[first + j];
    if (o.op != lead.op)
      fault(fmt_lane_error(o, j, "meets a different warp collective with the same mask"));
    if (o.op == WarpOp::shuffle) {
      if (o.src < 0 || o.src >= 32 || !(mask >> o.src & 1u))
        fault(fmt_lane_error(o, o.src, "shuffles from a lane outside the mask"));
      o.result = sched.threads[first + o.src].value;
    } else if (o.op == WarpOp::ballot) {
      o.result = ballot;
    }
    o.wait = Wait::ready;
  }
  return true;
}

// The block barrier: released when every thread still running has arrived
// (threads that exited no longer count, as on sm_70 and later).
void release_block_if_complete() {
  if (sched.at_barrier == 0 || sched.at_barrier != sched.live) return;
  for (ThreadState& t : sched.threads)
    if (t.wait == Wait::block) t.wait = Wait::ready;
  sched.at_barrier = 0;
}

[[noreturn]] void deadlock(int n) {
  for (int i = 0; i < n; ++i) {
    const ThreadState& t = sched.threads[i];
    if (t.wait != Wait::warp) continue;
    const int first = i / 32 * 32;
    for (int j = 0; j < 32; ++j) {
      if (!(t.mask >> j & 1u)) continue;
      if (first + j >= n) fault(fmt_lane_error(t, j, "names a lane past the block's last thread"));
      if (sched.threads[first + j].wait == Wait::done)
        fault(fmt_lane_error(t, j, "waits for a lane that has exited"));
    }
  }
  std::string s = "deadlock (a GPU hangs here):";
  int shown = 0;
  for (int i = 0; i < n && shown < 8; ++i) {
    const ThreadState& t = sched.threads[i];
    if (t.wait == Wait::done) continue;
    s += " thread " + std::to_string(i) + " at " + wait_name(t);
    if (t.wait == Wait::warp) {
      char m[16];
      std::snprintf(m, sizeof m, "%08x", t.mask);
      s += std::string("(mask ") + m + ")";
    }
    s += ";";
    ++shown;
  }
  fault(s);
}

void run_block(int n, bool reverse) {
  const int x = static_cast<int>(tls_block.block_dim.x), y = static_cast<int>(tls_block.block_dim.y);
  for (int i = 0; i < n; ++i) {
    ThreadState& t = sched.threads[i];
    t.linear = i;
    t.products = 0;
    t.idx = {static_cast<unsigned>(i % x), static_cast<unsigned>(i / x % y),
             static_cast<unsigned>(i / (x * y))};
    prepare(t, sched.stacks[i]);
  }
  sched.live = n;
  sched.at_barrier = 0;
  sched.warp_waiting.assign(static_cast<size_t>(n + 31) / 32, 0);
  ++sched.block_runs;
  while (sched.live > 0) {
    bool ran = false;
    for (int k = 0; k < n; ++k) {
      ThreadState& t = sched.threads[reverse ? n - 1 - k : k];
      if (t.wait != Wait::ready) continue;
      sched.current = &t;
      tls_thread_idx = t.idx;
      before_switch(&sched.home_fake, t.stack);
      cuda_emu_switch(&sched.home_sp, t.sp);
      after_switch(sched.home_fake, nullptr);
      sched.current = nullptr;
      ran = true;
    }
    if (!ran) deadlock(n);
  }
  for (const Scheduler::SharedBlock& b : sched.shared_blocks) std::free(b.mem);
  sched.shared_blocks.clear();
}

}  // namespace

std::string fmt_lane_error(const ThreadState& t, int lane, const char* what) {
  char m[16];
  std::snprintf(m, sizeof m, "%08x", t.mask);
  return "thread " + std::to_string(t.linear) + " in " + t.where + " (mask " + m + ") " + what +
         " (lane " + std::to_string(lane) + ")";
}

void* shared_block(const void* site, size_t bytes) {
  for (const Scheduler::SharedBlock& b : sched.shared_blocks)
    if (b.site == site) return b.mem;
  void* p = nullptr;
  if (posix_memalign(&p, 256, bytes) != 0) {
    std::fprintf(stderr, "cuda emulator: cannot allocate %zu bytes of shared memory\n", bytes);
    std::abort();
  }
  std::memset(p, 0xFF, bytes);  // uninitialised shared memory reads as NaN
  sched.shared_blocks.push_back({site, p});
  return p;
}

uint64_t block_serial() { return sched.block_runs; }
uint64_t next_product_index() { return self().products++; }

void sync_block() {
  ThreadState& t = self();
  t.wait = Wait::block;
  ++sched.at_barrier;
  release_block_if_complete();
  if (t.wait != Wait::ready) suspend(t);
}

uint64_t warp_collective(unsigned mask, WarpOp op, uint64_t value, int src) {
  ThreadState& t = self();
  const unsigned lane = static_cast<unsigned>(t.linear % 32);
  t.where = op == WarpOp::sync ? "__syncwarp" : op == WarpOp::shuffle ? "__shfl_*_sync"
                                                                      : "__ballot_sync";
  if (!(mask >> lane & 1u)) fault(fmt_lane_error(t, static_cast<int>(lane), "is not in its own mask"));
  t.mask = mask;
  t.op = op;
  t.value = value;
  t.src = src;
  t.wait = Wait::warp;
  int& waiting = sched.warp_waiting[static_cast<size_t>(t.linear / 32)];
  const int lanes = __builtin_popcount(mask);
  if (++waiting >= lanes && try_release(t.linear / 32 * 32, mask)) waiting -= lanes;
  if (t.wait != Wait::ready) suspend(t);
  return t.result;
}

unsigned live_lanes() {
  ThreadState& t = self();
  const int first = t.linear / 32 * 32;
  const int n = static_cast<int>(sched.threads.size());
  unsigned m = 0;
  for (int j = 0; j < 32 && first + j < n; ++j)
    if (sched.threads[first + j].wait != Wait::done) m |= 1u << j;
  return m;
}

namespace {
// Set while this thread runs a launch's fibers: a launch from inside is a
// kernel launching a kernel. Per thread, since the thread that queues a launch
// may be another than the one running the queue.
thread_local bool tls_in_kernel = false;

// One launch, when its stream reaches it: every block in turn, each block's
// threads as fibers on this thread.
void run_launch(const LaunchConfig& cfg, BodyFn body, void* closure) {
  tls_in_kernel = true;
  const dim3 b = cfg.block, g = cfg.grid;
  const int n = static_cast<int>(b.x * b.y * b.z);
  while (static_cast<int>(sched.stacks.size()) < n) sched.stacks.push_back({new_stack()});
  sched.threads.assign(static_cast<size_t>(n), ThreadState{});
  // Dynamic shared memory: exactly the launch's bytes, so a read past them
  // meets AddressSanitizer's redzone instead of slack.
  void* smem = nullptr;
  if (cfg.smem && posix_memalign(&smem, 256, cfg.smem) != 0) {
    std::fprintf(stderr, "cuda emulator: cannot allocate %zu bytes of shared memory\n", cfg.smem);
    std::abort();
  }
  sched.body = body;
  sched.closure = closure;
  sched.site = std::string(cfg.file) + ":" + std::to_string(cfg.line);
  tls_block.block_dim = b;
  tls_block.grid_dim = g;
  tls_block.dynamic_smem = static_cast<unsigned char*>(smem);
  const bool reverse = (sched.launches++ & 1u) != 0;
  sched.running = true;
  for (unsigned z = 0; z < g.z; ++z)
    for (unsigned y = 0; y < g.y; ++y)
      for (unsigned x = 0; x < g.x; ++x) {
        if (smem) std::memset(smem, 0xFF, cfg.smem);  // uninitialised shared memory reads as NaN
        tls_block.block_idx = {x, y, z};
        run_block(n, reverse);
      }
  sched.running = false;
  tls_in_kernel = false;
  std::free(smem);
}
}  // namespace

void launch(const void* kernel, const LaunchConfig& cfg, BodyFn body, std::shared_ptr<void> closure) {
  if (tls_in_kernel) {
    std::fprintf(stderr, "cuda emulator: a kernel launched another kernel\n");
    std::abort();
  }
  const cudaError_t err = check_launch(kernel, cfg);
  if (err != cudaSuccess) {
    set_last_error(err);
    return;
  }
  enqueue(cfg.stream, [cfg, body, closure = std::move(closure)] { run_launch(cfg, body, closure.get()); });
}

}  // namespace cuda_emu
