// The KV-replica sub-group: a split of the tp communicator.
#include "parallel/kv_replicas.h"

#include "kernels/error.h"
#include "parallel/mesh.h"
#include "parallel/mpi_communicator.h"
#include "parallel/nccl_communicator.h"

namespace trainer::parallel {

std::unique_ptr<Communicator> make_kv_replica_group(Mesh& mesh, int replicas) {
  Communicator& tp = mesh.comm(Axis::tp);
  TRAINER_CHECK(replicas >= 1 && tp.size() % replicas == 0,
                "KV replicas {} do not divide the tp group of {}", replicas, tp.size());
  if (replicas == 1 || replicas == tp.size()) return nullptr;
  const int color = tp.rank() / replicas, key = tp.rank() % replicas;
  Watchdog& dog = mesh.watchdog();
  std::unique_ptr<Communicator> group;
  {
    CollectiveGuard guard(&dog, "tp_kv", "comm_split", key, replicas);
    group = mesh.device() == Device::cpu
                ? mpi_split(tp, color, key, "tp_kv")
                : nccl_split(tp, color, key, "tp_kv", dog.timeout_s());
  }
  TRAINER_CHECK(group->size() == replicas && group->rank() == key,
                "tp_kv: split gave rank {} of {}, expected {} of {}", group->rank(),
                group->size(), key, replicas);
  group->set_watchdog(&dog);
  return group;
}

}  // namespace trainer::parallel
