// What AddressSanitizer must be told about the emulator's fibers
// (scheduler.cpp): which stack the thread runs on after each hand-written
// switch. Without it, ASan takes a fiber's frames for wild accesses to the
// launching thread's stack and reports (or unwinds into) the wrong stack when
// a kernel faults. No-ops in a build without ASan.
#pragma once

#include <cstddef>

#if defined(__SANITIZE_ADDRESS__)
#define CUDA_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CUDA_EMU_ASAN 1
#endif
#endif
#if CUDA_EMU_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

// For a function that never returns (a fiber's outermost frame): an
// instrumented frame poisons its redzones on entry and clears them on return,
// so this one's would stay poisoned under the next fiber that reuses the stack.
#if CUDA_EMU_ASAN
#define CUDA_EMU_NO_ASAN __attribute__((no_sanitize_address))
#else
#define CUDA_EMU_NO_ASAN
#endif

namespace cuda_emu {

struct StackRange {
  const void* bottom = nullptr;  // lowest address
  size_t size = 0;
};

// Just before switching to stack `to`. `fake` keeps the leaving stack's fake
// frames until it resumes; nullptr for a stack that never resumes.
inline void before_switch(void** fake, const StackRange& to) {
#if CUDA_EMU_ASAN
  __sanitizer_start_switch_fiber(fake, to.bottom, to.size);
#else
  (void)fake, (void)to;
#endif
}

// First thing on the stack switched to: `fake` as its before_switch saved it
// (nullptr on a fresh stack); `from`, when not null, gets the stack left.
inline void after_switch(void* fake, StackRange* from) {
#if CUDA_EMU_ASAN
  __sanitizer_finish_switch_fiber(fake, from ? &from->bottom : nullptr, from ? &from->size : nullptr);
#else
  (void)fake, (void)from;
#endif
}

}  // namespace cuda_emu
