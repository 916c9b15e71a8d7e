// Expert-parallel token exchange: the paired region ops an MoE layer places
// around its routed experts when they are spread over an ep group (each rank
// holds E / ep consecutive experts). As in DeepEP, the backward of dispatch
// is a combine and the backward of combine is a dispatch.
//
//   ep_dispatch   forward: tokens to the ranks owning their experts    backward: ep_combine
//   ep_combine    forward: expert outputs back to the tokens' ranks    backward: ep_dispatch
//
// Layout. A sender's rows (S, C) are grouped by global expert (the MoE
// dispatch plan), so the rows for peer p, owner of experts [p*El, (p+1)*El),
// are one contiguous block. A receiver's rows (R, C) are grouped by source
// peer, then by its local expert: block (q, l) holds what peer q routed to
// local expert l, in q's slot order (so every block is exactly the rows a
// single rank would have given that expert for q's micro-batch).
#pragma once

#include <cstdint>
#include <vector>

#include "parallel/communicator.h"

namespace trainer::parallel {

// Row counts of one exchange, on the host.
struct EpRoute {
  int ep = 1;                            // group size
  int local_experts = 0;                 // El = E / ep
  std::vector<int64_t> send_rows;        // (ep) rows this rank sends to each peer
  std::vector<int64_t> recv_rows;        // (ep) rows it receives from each peer
  std::vector<int64_t> recv_expert_rows; // (ep * El) rows from peer q for local expert l, at q*El + l
  int64_t max_recv = 0;                  // the most rows any rank of the group receives
  int64_t total_send() const;
  int64_t total_recv() const;
};

// Exchanges the counts (before any rows move): kept (E) i32, this rank's
// kept assignments per global expert -> all_counts (ep, E) i32 written, row
// p = rank p's kept counts (an all-gather, so every rank also knows what
// every other receives: a receive-buffer overflow is seen by all at once).
// Both live on the communicator's device; returns the route read back.
EpRoute ep_exchange_counts(Communicator& ep, Tensor kept, Tensor all_counts);
// The same route rebuilt from the counts saved by the forward (no communication).
EpRoute ep_route(int ep_size, int rank, Tensor all_counts);

// tokens (>= total_send, C) -> received (>= total_recv, C): rows [0, total_recv) written.
void ep_dispatch(Communicator& ep, const EpRoute& route, Tensor tokens, Tensor received);
// expert_out (>= total_recv, C) -> out (>= total_send, C): rows [0, total_send)
// written, each back in the slot its token was sent from.
void ep_combine(Communicator& ep, const EpRoute& route, Tensor expert_out, Tensor out);

// The mirrors, named for where they sit in a backward pass.
inline void ep_combine_backward(Communicator& ep, const EpRoute& route, Tensor dout,
                                Tensor dexpert_out) {
  ep_dispatch(ep, route, dout, dexpert_out);
}
inline void ep_dispatch_backward(Communicator& ep, const EpRoute& route, Tensor dreceived,
                                 Tensor dtokens) {
  ep_combine(ep, route, dreceived, dtokens);
}

}  // namespace trainer::parallel
