// KV-head replication over tensor parallelism: when a model has fewer KV heads
// than tp ranks (GQA/MQA), each KV head is held by tp / n_kv_head consecutive
// tp ranks, and their partial gradients of it are summed over that sub-group.
#pragma once

#include <memory>

#include "parallel/communicator.h"

namespace trainer::parallel {

class Mesh;

// Consecutive tp ranks holding the same KV head: tp / n_kv_head when
// n_kv_head < tp (the mesh rules make it exact), else 1 (KV heads are split).
inline int kv_replicas(int n_kv_head, int tp) { return n_kv_head < tp ? tp / n_kv_head : 1; }

// The communicator over the tp ranks holding this rank's KV head (tp rank r
// joins group r / replicas, its rank there r % replicas). Collective over the
// tp group. Null when no sub-group is needed: replicas 1 (nothing is
// replicated) or replicas == tp (the tp group itself is that group).
std::unique_ptr<Communicator> make_kv_replica_group(Mesh& mesh, int replicas);

}  // namespace trainer::parallel
