// Document boundaries of packed sequences, from the eod token alone: every
// layout reads the same sequences, so each rank derives the same boundaries.
#include "engine/documents.h"

namespace trainer::engine {

void document_layout(const int32_t* ids, int64_t T, int32_t eod, int32_t* doc_start,
                     int32_t* positions) {
  int32_t start = 0;
  for (int64_t t = 0; t < T; ++t) {
    if (t > 0 && ids[t - 1] == eod) start = static_cast<int32_t>(t);
    if (doc_start) doc_start[t] = start;
    if (positions) positions[t] = static_cast<int32_t>(t) - start;
  }
}

int64_t mask_eod_targets(const int32_t* ids, int32_t* targets, int64_t T, int32_t eod) {
  int64_t masked = 0;
  for (int64_t t = 0; t < T; ++t)
    if (ids[t] == eod) {
      targets[t] = -1;
      ++masked;
    }
  return masked;
}

}  // namespace trainer::engine
