// The embedding group: a split of the pp communicator.
#include "parallel/embedding_group.h"

#include "kernels/error.h"
#include "parallel/mesh.h"
#include "parallel/mpi_communicator.h"
#include "parallel/nccl_communicator.h"

namespace trainer::parallel {

std::unique_ptr<Communicator> make_embedding_group(Mesh& mesh, bool first_or_last) {
  Communicator& pp = mesh.comm(Axis::pp);
  TRAINER_CHECK(pp.size() > 1, "embedding group of a pp group of {}: needs a pipeline", pp.size());
  const int color = first_or_last ? 0 : 1, key = pp.rank();
  Watchdog& dog = mesh.watchdog();
  std::unique_ptr<Communicator> group;
  {
    CollectiveGuard guard(&dog, "pp_embedding", "comm_split", key, pp.size());
    group = mesh.device() == Device::cpu
                ? mpi_split(pp, color, key, "pp_embedding")
                : nccl_split(pp, color, key, "pp_embedding", dog.timeout_s());
  }
  if (first_or_last)
    TRAINER_CHECK(group->size() == 2, "pp_embedding: split gave a group of {}, expected the first and "
                  "the last stage", group->size());
  group->set_watchdog(&dog);
  return group;
}

}  // namespace trainer::parallel
