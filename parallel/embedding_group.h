// Megatron's embedding group: with a pipeline and tied embeddings, the first
// stage holds the token table and the last stage a copy for the LM head; both
// must take the same update, so their two gradients are summed between them
// alone. Middle stages hold neither and take no part: no full-vocabulary
// buffer of zeros on them and no table-sized all-reduce through them.
#pragma once

#include <memory>

#include "parallel/communicator.h"

namespace trainer::parallel {

class Mesh;

// The communicator over this pp group's first and last stage (rank 0 the
// first). Collective over the pp group (pp > 1). Middle stages split off a
// group of their own, which they never use; it is returned all the same, as
// MPI_Comm_split and ncclCommSplit give one to every color.
std::unique_ptr<Communicator> make_embedding_group(Mesh& mesh, bool first_or_last);

}  // namespace trainer::parallel
