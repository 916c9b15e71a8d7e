// Documents packed into training sequences (data.reset_attention_mask,
// reset_position_ids, eod_mask_loss; Megatron's get_ltor_masks_and_position_ids):
// a document ends with the eod token, and the token after it starts the next.
#pragma once

#include <cstdint>

namespace trainer::engine {

// One sequence's input ids x[0, T): doc_start[t] = the position after the last
// eod in x[0, t) (0 when none), the first key token t may attend to;
// positions[t] = t - doc_start[t]. Either output may be null.
void document_layout(const int32_t* ids, int64_t T, int32_t eod, int32_t* doc_start,
                     int32_t* positions);

// eod_mask_loss: targets[t] = -1 (ignored) wherever ids[t] is the eod, so no
// token is predicted across a document boundary. Returns how many were masked.
int64_t mask_eod_targets(const int32_t* ids, int32_t* targets, int64_t T, int32_t eod);

}  // namespace trainer::engine
