// Pipeline schedules as tables of actions: Megatron's 1F1B and interleaved
// 1F1B, their warm-up lengths, peak in-flight micro-batches and bubble
// fraction, and a simulator that runs every rank's table together to prove
// the tables are executable (no deadlock, every input present before use).
//
// A table is one rank's program for one training step. Stage numbering:
// with p ranks and v virtual stages, the model is cut into v*p pieces; piece
// (global stage) s = chunk * p + rank lives on `rank` as its model chunk
// `chunk` (Megatron's layout), so activations go rank 0..p-1 for chunk 0,
// then wrap from rank p-1 to rank 0 for chunk 1, and so on. Plain 1F1B is
// the case v = 1.
//
// Communication is explicit in the table rather than folded into the compute
// actions: every "is this the first/last stage, who is my neighbour, does the
// chunk wrap around" decision lives here, in the builder that the tests
// check, and the executor stays a flat switch with one line per kind:
//
//   recv_forward(mb, c)   blocking receive of the input activation of chunk c
//   forward(mb, c)        run chunk c on that input (chunk 0 of rank 0 reads data)
//   send_forward(mb, c)   NON-blocking send of chunk c's output to `peer`
//   recv_backward(mb, c)  blocking receive of the output gradient of chunk c
//   backward(mb, c)       backward of chunk c (the last stage starts from the loss)
//   send_backward(mb, c)  NON-blocking send of chunk c's input gradient to `peer`
//
// Sends must not block until the peer receives: with blocking rendezvous
// sends, 1F1B's steady state deadlocks (rank r sends forward to r+1 while r+1
// sends backward to r). simulate() models MPI's isend semantics (sends never
// wait). NCCL's sends and receives may each wait for the peer, and a pair's
// messages match in issue order; there the table runs as batched_program():
// before each compute action one group holds the sends of earlier computes
// and the receives this compute needs, and before a forward that a backward
// follows also that backward's gradient, as in Megatron's
// send_forward_backward_recv_forward_backward. simulate_batched() checks a
// set of programs under those semantics. execute_schedule() is the executor:
// it calls one StageOps function per action, in table order, or (end_batch
// set) in batched_program() order with end_batch after each group.
//
// Example: 1F1B, pp 4, m 8, compute actions only, in table order
// (F3 = forward of micro-batch 3, B3 its backward):
//
//   rank 0: F0 F1 F2 | F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 | B5 B6 B7    warm-up 3
//   rank 1: F0 F1    | F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 | B6 B7 warm-up 2
//   rank 2: F0       | F1 B0 F2 B1 ... F7 B6 | B7                  warm-up 1
//   rank 3:          | F0 B0 F1 B1 ... F7 B7                       warm-up 0
//
// and in time, from describe_timeline() with forward 1, backward 2 (a digit
// is a forward of that micro-batch, a letter its backward: a = 0, b = 1, ...;
// '.' idle). The makespan is (m + p - 1) * (f + b) = 33:
//
//   rank 0: 0123......aa4bb5cc6dd7ee.ff.gg.hh
//   rank 1: .012....aa3bb4cc5dd6ee7ff.gg.hh..
//   rank 2: ..01..aa2bb3cc4dd5ee6ff7gg.hh....
//   rank 3: ...0aa1bb2cc3dd4ee5ff6gg7hh......
//
// Interleaved, pp 4, v 2, m 8 (F3.1 = forward of micro-batch 3 on chunk 1):
// micro-batches go in groups of p, each group through chunk 0 then chunk 1;
// backwards visit chunks in reverse. Rank r warms up with
// min((p - 1 - r) * 2 + (v - 1) * p, v * m) forwards (current Megatron-Core,
// which dropped the old all-forwards-first special case for m == p):
//
//   rank 0: F0.0 F1.0 F2.0 F3.0 F0.1 F1.1 F2.1 F3.1 F4.0 F5.0 | F6.0 B0.1 F7.0
//           B1.1 F4.1 B2.1 F5.1 B3.1 F6.1 B0.0 F7.1 B1.0 | B2.0 B3.0 B4.1 ... B7.0
//   rank 3: F0.0 F1.0 F2.0 F3.0 | F0.1 B0.1 F1.1 B1.1 ... F7.1 B7.1 | B4.0 ... B7.0
//
// In time, with chunk costs forward 1, backward 2 (chunks not shown), the
// makespan is (v * m + p - 1) * (f + b) = 57 against 1F1B's 66 on the same
// layers (chunk costs doubled):
//
//   rank 0: 01230123456...aa7bb.4cc5dd6aa7bbcc.dd.ee.ff.gg.hheeffgghh
//   rank 3: ...01230aa1bb2cc3dd4aa5bb6cc7dd4ee5ff6gg7hheeffgghh......
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace trainer::parallel {

enum class ActionKind { recv_forward, forward, send_forward, recv_backward, backward, send_backward };

struct Action {
  ActionKind kind;
  int micro_batch;   // 0 .. num_micro_batches-1
  int chunk;         // model chunk on this rank: global stage chunk * pp_size + pp_rank
  int peer = -1;     // pp rank sent to / received from; -1 for compute actions
  bool operator==(const Action&) const = default;
};

using Schedule = std::vector<Action>;

// What one rank does for each kind of action; each gets the whole Action
// (micro-batch, chunk, peer). Sends must return without waiting for the peer
// (see above); receives block. A member the table needs but that is unset
// throws Error at that action rather than skipping it.
struct StageOps {
  std::function<void(const Action&)> recv_forward, forward, send_forward;
  std::function<void(const Action&)> recv_backward, backward, send_backward;
  // Optional: run the table as batched_program(); called after each group's
  // send/recv actions, to issue them together.
  std::function<void()> end_batch;
};

bool is_p2p(ActionKind kind);

// One step of a batched program: the send/recv actions `p2p` (indices into
// the table, in table order) issued as one group, then the compute action
// `compute` (-1 for the last step, which only sends).
struct BatchedStep {
  std::vector<int> p2p;
  int compute = -1;
};
// The table as groups and computes. Each compute's receives are in the group
// before it (a backward's already in the group before the forward it follows
// in 1F1B's steady state). A send waits for the next group, and a forward's
// output also past a backward (to pair with that backward's input gradient);
// a send_backward never passes a backward (which overwrites the gradient it
// sends). Every rank's sends to a peer, and receives from it, keep the
// table's order, so MPI and NCCL match the same messages.
std::vector<BatchedStep> batched_program(const Schedule& table);

// The executor: runs one rank's table, one call per action.
void execute_schedule(const Schedule& table, const StageOps& ops);

// Megatron's non-interleaved 1F1B: min(pp_size - pp_rank - 1, m) warm-up
// forwards, then one forward + one backward per step, then the remaining
// backwards. Refuses num_micro_batches < 1 (InputError naming train.global_batch).
Schedule schedule_1f1b(int pp_size, int pp_rank, int num_micro_batches);

// Megatron's interleaved 1F1B over virtual_stages chunks per rank.
// Refuses (InputError) virtual_stages < 2, pp_size < 2, and a number of
// micro-batches that is not a positive multiple of pp_size.
Schedule schedule_interleaved(int pp_size, int pp_rank, int num_micro_batches, int virtual_stages);

// schedule_1f1b when virtual_stages == 1, schedule_interleaved otherwise.
Schedule pipeline_schedule(int pp_size, int pp_rank, int num_micro_batches, int virtual_stages);

// Forwards a rank runs before its first backward, as the builders define it:
// 1F1B: min(p - rank - 1, m); interleaved: min((p - rank - 1) * 2 + (v - 1) * p, v * m).
int warmup_forwards(int pp_size, int pp_rank, int num_micro_batches, int virtual_stages);

// The most (micro-batch, chunk) pairs whose forward has run and backward has
// not, over the table: how many activations this rank holds at once.
int peak_in_flight(const Schedule& table);

// The transformer layers [begin, end) of global stage chunk * pp_size + pp_rank
// when n_layer layers are cut into pp_size * virtual_stages contiguous stages
// (Megatron's interleaved layout). Uneven counts give the first n_layer % S
// stages one layer more. Refuses n_layer < pp_size * virtual_stages.
struct LayerRange {
  int begin = 0, end = 0;
  bool operator==(const LayerRange&) const = default;
};
LayerRange stage_layers(int n_layer, int pp_size, int virtual_stages, int pp_rank, int chunk);

// Megatron's bubble time over ideal compute time: (p - 1) / (v * m).
double bubble_fraction(int pp_size, int num_micro_batches, int virtual_stages);

// Cost of one action of a table, in any time unit. For interleaved tables a
// chunk holds 1/v of the rank's layers: compare with 1F1B at v times the cost.
struct SimCosts {
  double forward = 1.0;
  double backward = 2.0;
  double p2p = 0.0;  // latency from a send to the earliest matching receive
};

struct SimResult {
  bool deadlock = false;
  double makespan = 0.0;                   // when the last rank finishes
  std::vector<std::vector<double>> start;  // [rank][action index]: start time (-1: never ran)
  std::string stuck;                       // when deadlocked: the action each blocked rank waits in
};

// Runs all ranks' tables together (tables[r] is rank r's). A receive waits for
// its matching send (plus p2p latency); sends never wait. Throws Error if a
// table is malformed: wrong peer, data used before it was received or
// computed, a message sent twice or never received.
SimResult simulate(const std::vector<Schedule>& tables, const SimCosts& costs = {});

// NCCL's semantics over batched_program(): each rank runs its program in
// order; a compute completes at once; a group blocks the rank until each of
// its sends and receives has met its partner in the peer's current group (a
// matched op stays done). A pair's sends and receives match in issue order,
// as in NCCL: a pair whose messages differ throws Error (NCCL would deliver
// the wrong tensor). Returns "" when every rank finishes, else the op each
// stuck rank waits for. Blocking the rank on every group is stronger than the
// GPU needs, so a host wait anywhere in the step cannot deadlock either.
std::string simulate_batched(const std::vector<Schedule>& tables);

// All ranks' tables for one configuration.
std::vector<Schedule> all_schedules(int pp_size, int num_micro_batches, int virtual_stages);

// One line for `trainer plan`: schedule name, micro-batches, warm-up per rank,
// peak in-flight per rank, bubble fraction.
std::string describe_schedule(int pp_size, int num_micro_batches, int virtual_stages);

// A time chart of a simulated run, one line per rank: each time unit shows a
// forward as its micro-batch's digit (mod 10), a backward as a letter (a = 0,
// mod 26), '.' when idle. Costs must be whole numbers.
std::string describe_timeline(const std::vector<Schedule>& tables, const SimCosts& costs = {});

const char* to_string(ActionKind kind);

}  // namespace trainer::parallel
