// The CUDA C++ Programming Guide's rule for every WMMA load and store, which
// both emulators of the tile code enforce (test/cuda_emu/include/mma.h and
// test/kernels/flash_emulator.h): the pointer 256-bit aligned, ldm a multiple
// of 16 bytes (8 16-bit elements, 4 floats). x86 reads a misplaced tile
// silently; a GPU may fault or load the wrong elements, so the emulators stop,
// naming the call, with exit status 1.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace trainer::testing {

template <class T>
void check_tile_address(const char* emulator, const char* op, const T* p, unsigned ldm) {
  if (reinterpret_cast<uintptr_t>(p) % 32 == 0 && (ldm * sizeof(T)) % 16 == 0) return;
  std::fprintf(stderr,
               "%s: %s at %p with ldm %u: the pointer must be 32-byte aligned and ldm a multiple "
               "of %zu elements\n",
               emulator, op, static_cast<const void*>(p), ldm, 16 / sizeof(T));
  std::fflush(stderr);
  std::_Exit(1);  // as a sanitizer's report ends: no unwinding out of an emulated lane
}

}  // namespace trainer::testing
