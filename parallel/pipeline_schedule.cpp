// Pipeline schedule tables (1F1B, interleaved 1F1B), their arithmetic, and
// the all-ranks simulator that checks a set of tables is executable.
#include "parallel/pipeline_schedule.h"

#include "kernels/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>
#include <utility>

namespace trainer::parallel {

namespace {

using Chunk = std::pair<int, int>;  // (micro_batch, chunk)

// Both schedules are the same three phases over an order of forwards and an
// order of backwards; they differ only in those orders and the warm-up length.
Schedule build_table(int pp_size, int pp_rank, int virtual_stages,
                     const std::vector<Chunk>& forwards, const std::vector<Chunk>& backwards,
                     int num_warmup) {
  const int num_stages = pp_size * virtual_stages;
  const int prev = (pp_rank - 1 + pp_size) % pp_size;
  const int next = (pp_rank + 1) % pp_size;
  Schedule table;
  table.reserve(forwards.size() * 6);
  auto add_forward = [&](Chunk mc) {
    const int stage = mc.second * pp_size + pp_rank;
    if (stage > 0) table.push_back({ActionKind::recv_forward, mc.first, mc.second, prev});
    table.push_back({ActionKind::forward, mc.first, mc.second});
    if (stage < num_stages - 1) table.push_back({ActionKind::send_forward, mc.first, mc.second, next});
  };
  auto add_backward = [&](Chunk mc) {
    const int stage = mc.second * pp_size + pp_rank;
    if (stage < num_stages - 1) table.push_back({ActionKind::recv_backward, mc.first, mc.second, next});
    table.push_back({ActionKind::backward, mc.first, mc.second});
    if (stage > 0) table.push_back({ActionKind::send_backward, mc.first, mc.second, prev});
  };
  const int total = static_cast<int>(forwards.size());
  const int num_steady = total - num_warmup;
  for (int k = 0; k < num_warmup; ++k) add_forward(forwards[k]);
  for (int k = 0; k < num_steady; ++k) {
    add_forward(forwards[num_warmup + k]);
    add_backward(backwards[k]);
  }
  for (int k = num_steady; k < total; ++k) add_backward(backwards[k]);
  return table;
}

void check_rank(int pp_size, int pp_rank) {
  TRAINER_INPUT_CHECK(pp_size >= 1, "parallel.pp: expected >= 1, got {}", pp_size);
  TRAINER_CHECK(pp_rank >= 0 && pp_rank < pp_size, "pp_rank {} outside 0..{}", pp_rank,
                pp_size - 1);
}

}  // namespace

const char* to_string(ActionKind kind) {
  switch (kind) {
    case ActionKind::recv_forward: return "recv_forward";
    case ActionKind::forward: return "forward";
    case ActionKind::send_forward: return "send_forward";
    case ActionKind::recv_backward: return "recv_backward";
    case ActionKind::backward: return "backward";
    case ActionKind::send_backward: return "send_backward";
  }
  return "?";
}

bool is_p2p(ActionKind kind) { return kind != ActionKind::forward && kind != ActionKind::backward; }

std::vector<BatchedStep> batched_program(const Schedule& table) {
  const int n = static_cast<int>(table.size());
  int chunks = 1;
  for (const Action& a : table) chunks = std::max(chunks, a.chunk + 1);
  // Megatron pairs steps only in its interleaved schedule with a steady phase
  // (some backward before the last forward).
  int first_backward = n, last_forward = -1;
  for (int i = 0; i < n; ++i) {
    if (table[i].kind == ActionKind::backward) first_backward = std::min(first_backward, i);
    if (table[i].kind == ActionKind::forward) last_forward = i;
  }
  const bool steady = first_backward < last_forward;
  // (Pairing plain 1F1B's steps too is as safe but delays every forward
  // output past a backward; its natural runs already pair send_forward with
  // recv_backward and send_backward with recv_forward.)
  const bool pair_steps = steady && chunks > 1;
  auto is_recv = [&](int i) {
    return table[i].kind == ActionKind::recv_forward || table[i].kind == ActionKind::recv_backward;
  };
  std::vector<int> computes;
  for (int i = 0; i < n; ++i)
    if (!is_p2p(table[i].kind)) computes.push_back(i);
  std::vector<BatchedStep> out;
  std::vector<int> sends;         // waiting, in table order
  std::vector<char> taken(n, 0);  // receives already in an earlier group
  int prev = -1;                  // previous compute
  for (size_t k = 0; k < computes.size(); ++k) {
    const int i = computes[k];
    BatchedStep st;
    std::vector<int> recvs;
    for (int j = prev + 1; j < i; ++j) {
      if (is_recv(j) && !taken[j]) recvs.push_back(j);
      if (!is_recv(j)) sends.push_back(j);
    }
    // 1F1B's steady pair F(x) B(y): y's gradient comes with x's input.
    const bool pair = pair_steps && table[i].kind == ActionKind::forward && k + 1 < computes.size() &&
                      table[computes[k + 1]].kind == ActionKind::backward;
    if (pair)
      for (int j = i + 1; j < computes[k + 1]; ++j)
        if (is_recv(j)) {
          recvs.push_back(j);
          taken[j] = 1;
        }
    // A forward's output alone before a backward waits for that backward's
    // input gradient (its slot outlives the backward of another micro-batch).
    const bool only_forward_sends =
        std::all_of(sends.begin(), sends.end(),
                    [&](int j) { return table[j].kind == ActionKind::send_forward; });
    const bool hold = pair_steps && table[i].kind == ActionKind::backward && recvs.empty() &&
                      only_forward_sends;
    if (!hold) {
      st.p2p = sends;
      sends.clear();
    }
    st.p2p.insert(st.p2p.end(), recvs.begin(), recvs.end());
    st.compute = i;
    out.push_back(std::move(st));
    prev = i;
  }
  for (int j = prev + 1; j < n; ++j) sends.push_back(j);
  if (!sends.empty()) out.push_back({sends, -1});
  return out;
}

void execute_schedule(const Schedule& table, const StageOps& ops) {
  auto run = [&](const Action& a) {
    const std::function<void(const Action&)>* op = nullptr;
    switch (a.kind) {
      case ActionKind::recv_forward: op = &ops.recv_forward; break;
      case ActionKind::forward: op = &ops.forward; break;
      case ActionKind::send_forward: op = &ops.send_forward; break;
      case ActionKind::recv_backward: op = &ops.recv_backward; break;
      case ActionKind::backward: op = &ops.backward; break;
      case ActionKind::send_backward: op = &ops.send_backward; break;
    }
    TRAINER_CHECK(op && *op, "execute_schedule: no operation for {}", to_string(a.kind));
    (*op)(a);
  };
  if (!ops.end_batch) {
    for (const Action& a : table) run(a);
    return;
  }
  for (const BatchedStep& st : batched_program(table)) {
    for (int j : st.p2p) run(table[j]);
    if (!st.p2p.empty()) ops.end_batch();
    if (st.compute >= 0) run(table[st.compute]);
  }
}

int warmup_forwards(int pp_size, int pp_rank, int num_micro_batches, int virtual_stages) {
  if (virtual_stages == 1) return std::min(pp_size - pp_rank - 1, num_micro_batches);
  // Megatron: every rank first fills (v - 1) groups of p chunk-forwards so the
  // wrap-around from the last rank to rank 0 is primed; earlier ranks need two
  // more per position because each of their 1F1B steps waits a round trip.
  const int total = num_micro_batches * virtual_stages;
  return std::min((pp_size - pp_rank - 1) * 2 + (virtual_stages - 1) * pp_size, total);
}

Schedule schedule_1f1b(int pp_size, int pp_rank, int num_micro_batches) {
  check_rank(pp_size, pp_rank);
  TRAINER_INPUT_CHECK(num_micro_batches >= 1,
                      "train.global_batch: the pipeline needs at least one micro-batch per step "
                      "(global_batch / (micro_batch * dp)), got {}", num_micro_batches);
  std::vector<Chunk> order;
  for (int mb = 0; mb < num_micro_batches; ++mb) order.push_back({mb, 0});
  return build_table(pp_size, pp_rank, 1, order, order,
                     warmup_forwards(pp_size, pp_rank, num_micro_batches, 1));
}

Schedule schedule_interleaved(int pp_size, int pp_rank, int num_micro_batches, int virtual_stages) {
  check_rank(pp_size, pp_rank);
  TRAINER_INPUT_CHECK(virtual_stages >= 2,
                      "parallel.virtual_stages: the interleaved schedule needs >= 2 model chunks "
                      "per pipeline rank, got {}", virtual_stages);
  TRAINER_INPUT_CHECK(pp_size >= 2,
                      "parallel.pp: the interleaved schedule needs >= 2 pipeline ranks, got {}",
                      pp_size);
  // Micro-batches run in groups of p through each chunk in turn; a partial
  // group would leave a rank waiting on a chunk that never arrives in order.
  TRAINER_INPUT_CHECK(num_micro_batches >= 1 && num_micro_batches % pp_size == 0,
                      "train.global_batch: the interleaved pipeline schedule needs the micro-batches "
                      "per step (global_batch / (micro_batch * dp)) to be a positive multiple of "
                      "parallel.pp = {}, got {}", pp_size, num_micro_batches);
  const int group = pp_size * virtual_stages;
  const int total = num_micro_batches * virtual_stages;
  std::vector<Chunk> forwards, backwards;
  for (int k = 0; k < total; ++k) {
    const int mb = (k / group) * pp_size + k % pp_size;
    const int chunk = (k % group) / pp_size;
    forwards.push_back({mb, chunk});
    backwards.push_back({mb, virtual_stages - 1 - chunk});
  }
  return build_table(pp_size, pp_rank, virtual_stages, forwards, backwards,
                     warmup_forwards(pp_size, pp_rank, num_micro_batches, virtual_stages));
}

Schedule pipeline_schedule(int pp_size, int pp_rank, int num_micro_batches, int virtual_stages) {
  TRAINER_INPUT_CHECK(virtual_stages >= 1, "parallel.virtual_stages: expected >= 1, got {}",
                      virtual_stages);
  if (virtual_stages == 1) return schedule_1f1b(pp_size, pp_rank, num_micro_batches);
  return schedule_interleaved(pp_size, pp_rank, num_micro_batches, virtual_stages);
}

std::vector<Schedule> all_schedules(int pp_size, int num_micro_batches, int virtual_stages) {
  std::vector<Schedule> tables;
  for (int r = 0; r < pp_size; ++r)
    tables.push_back(pipeline_schedule(pp_size, r, num_micro_batches, virtual_stages));
  return tables;
}

int peak_in_flight(const Schedule& table) {
  int in_flight = 0, peak = 0;
  for (const Action& a : table) {
    if (a.kind == ActionKind::forward) peak = std::max(peak, ++in_flight);
    if (a.kind == ActionKind::backward) --in_flight;
  }
  return peak;
}

LayerRange stage_layers(int n_layer, int pp_size, int virtual_stages, int pp_rank, int chunk) {
  const int num_stages = pp_size * virtual_stages;
  TRAINER_INPUT_CHECK(n_layer >= num_stages,
                      "model.n_layer: every pipeline stage needs a layer: parallel.pp * "
                      "parallel.virtual_stages = {} * {} must be <= model.n_layer ({})",
                      pp_size, virtual_stages, n_layer);
  TRAINER_CHECK(pp_rank >= 0 && pp_rank < pp_size && chunk >= 0 && chunk < virtual_stages,
                "stage_layers: rank {} chunk {} outside {} x {}", pp_rank, chunk, pp_size,
                virtual_stages);
  const int stage = chunk * pp_size + pp_rank;
  const int base = n_layer / num_stages, extra = n_layer % num_stages;
  const int begin = stage * base + std::min(stage, extra);
  return {begin, begin + base + (stage < extra ? 1 : 0)};
}

double bubble_fraction(int pp_size, int num_micro_batches, int virtual_stages) {
  TRAINER_CHECK(pp_size >= 1 && num_micro_batches >= 1 && virtual_stages >= 1,
                "bubble_fraction({}, {}, {})", pp_size, num_micro_batches, virtual_stages);
  return static_cast<double>(pp_size - 1) / (static_cast<double>(virtual_stages) * num_micro_batches);
}

namespace {

// What one rank has done so far, to check every action has its inputs.
struct RankState {
  size_t pc = 0;
  double clock = 0.0;
  std::set<Chunk> inputs, grads, forwarded, backwarded;
};

enum Direction { kForward = 0, kBackward = 1 };
using MessageKey = std::tuple<int, int, int>;  // (direction, micro_batch, receiving global stage)

std::string action_name(const Action& a, int rank) {
  std::string s = fmt::format("rank {}: {}(micro-batch {}, chunk {})", rank, to_string(a.kind),
                              a.micro_batch, a.chunk);
  if (a.peer >= 0) s += fmt::format(" peer {}", a.peer);
  return s;
}

}  // namespace

SimResult simulate(const std::vector<Schedule>& tables, const SimCosts& costs) {
  const int pp_size = static_cast<int>(tables.size());
  TRAINER_CHECK(pp_size >= 1, "simulate: no tables");
  int num_chunks = 1;
  for (const Schedule& t : tables)
    for (const Action& a : t) num_chunks = std::max(num_chunks, a.chunk + 1);
  const int num_stages = pp_size * num_chunks;

  SimResult result;
  std::vector<RankState> ranks(pp_size);
  for (int r = 0; r < pp_size; ++r) result.start.emplace_back(tables[r].size(), -1.0);
  std::map<MessageKey, double> in_transit;  // sent, not yet received: arrival time
  std::set<MessageKey> sent;

  auto send = [&](int rank, const Action& a, Direction dir, int to_stage) {
    const std::string name = action_name(a, rank);
    TRAINER_CHECK(to_stage >= 0 && to_stage < num_stages, "{}: no stage {}", name, to_stage);
    TRAINER_CHECK(a.peer == to_stage % pp_size, "{}: stage {} lives on rank {}", name, to_stage,
                  to_stage % pp_size);
    const MessageKey key{dir, a.micro_batch, to_stage};
    TRAINER_CHECK(sent.insert(key).second, "{}: sent twice", name);
    in_transit[key] = ranks[rank].clock + costs.p2p;
  };
  // Returns false when the message has not been sent yet.
  auto receive = [&](int rank, const Action& a, Direction dir, int stage, int from_stage) {
    const std::string name = action_name(a, rank);
    TRAINER_CHECK(from_stage >= 0 && from_stage < num_stages, "{}: no stage {}", name, from_stage);
    TRAINER_CHECK(a.peer == from_stage % pp_size, "{}: stage {} lives on rank {}", name,
                  from_stage, from_stage % pp_size);
    auto it = in_transit.find({dir, a.micro_batch, stage});
    if (it == in_transit.end()) return false;
    ranks[rank].clock = std::max(ranks[rank].clock, it->second);
    in_transit.erase(it);
    return true;
  };

  // Tries the next action of one rank; false when it must wait for a message.
  auto step = [&](int rank) {
    RankState& st = ranks[rank];
    const Action& a = tables[rank][st.pc];
    const std::string name = action_name(a, rank);
    TRAINER_CHECK(a.chunk >= 0 && a.micro_batch >= 0, "{}: negative index", name);
    const Chunk mc{a.micro_batch, a.chunk};
    const int stage = a.chunk * pp_size + rank;
    const double begin = st.clock;
    switch (a.kind) {
      case ActionKind::recv_forward:
        if (!receive(rank, a, kForward, stage, stage - 1)) return false;
        TRAINER_CHECK(st.inputs.insert(mc).second, "{}: received twice", name);
        break;
      case ActionKind::forward:
        TRAINER_CHECK(stage == 0 || st.inputs.count(mc), "{}: input not received", name);
        TRAINER_CHECK(st.forwarded.insert(mc).second, "{}: ran twice", name);
        st.clock += costs.forward;
        break;
      case ActionKind::send_forward:
        TRAINER_CHECK(st.forwarded.count(mc), "{}: before its forward", name);
        send(rank, a, kForward, stage + 1);
        break;
      case ActionKind::recv_backward:
        if (!receive(rank, a, kBackward, stage, stage + 1)) return false;
        TRAINER_CHECK(st.grads.insert(mc).second, "{}: received twice", name);
        break;
      case ActionKind::backward:
        TRAINER_CHECK(st.forwarded.count(mc), "{}: before its forward", name);
        TRAINER_CHECK(stage == num_stages - 1 || st.grads.count(mc), "{}: gradient not received",
                      name);
        TRAINER_CHECK(st.backwarded.insert(mc).second, "{}: ran twice", name);
        st.clock += costs.backward;
        break;
      case ActionKind::send_backward:
        TRAINER_CHECK(st.backwarded.count(mc), "{}: before its backward", name);
        send(rank, a, kBackward, stage - 1);
        break;
    }
    result.start[rank][st.pc] = a.kind == ActionKind::recv_forward ||
                                        a.kind == ActionKind::recv_backward
                                    ? st.clock
                                    : begin;
    ++st.pc;
    return true;
  };

  // A receive's time depends only on its sender's clock at the send, so any
  // order of advancing the ranks gives the same times; stop when none moves.
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < pp_size; ++r)
      while (ranks[r].pc < tables[r].size() && step(r)) progress = true;
  }
  for (int r = 0; r < pp_size; ++r) {
    result.makespan = std::max(result.makespan, ranks[r].clock);
    if (ranks[r].pc < tables[r].size()) {
      result.deadlock = true;
      if (!result.stuck.empty()) result.stuck += "; ";
      result.stuck += action_name(tables[r][ranks[r].pc], r);
    }
  }
  if (!result.deadlock)
    TRAINER_CHECK(in_transit.empty(), "{} message(s) sent and never received", in_transit.size());
  return result;
}

std::string simulate_batched(const std::vector<Schedule>& tables) {
  const int pp_size = static_cast<int>(tables.size());
  TRAINER_CHECK(pp_size >= 1, "simulate_batched: no tables");
  // The message an op carries: (direction, micro-batch, receiving global stage).
  auto message = [&](int rank, const Action& a) {
    const int stage = a.chunk * pp_size + rank;
    switch (a.kind) {
      case ActionKind::send_forward: return MessageKey{kForward, a.micro_batch, stage + 1};
      case ActionKind::recv_forward: return MessageKey{kForward, a.micro_batch, stage};
      case ActionKind::send_backward: return MessageKey{kBackward, a.micro_batch, stage - 1};
      default: return MessageKey{kBackward, a.micro_batch, stage};
    }
  };
  auto is_send = [](ActionKind k) {
    return k == ActionKind::send_forward || k == ActionKind::send_backward;
  };
  struct RankRun {
    std::vector<BatchedStep> program;
    size_t step = 0;          // program[step] is running
    bool in_group = true;     // its group (else its compute) is next
    std::vector<int> order;   // p2p actions in issue order
    std::vector<char> done;   // per action: a matched send or receive
  };
  std::vector<RankRun> ranks(pp_size);
  for (int r = 0; r < pp_size; ++r) {
    RankRun& st = ranks[r];
    st.program = batched_program(tables[r]);
    st.done.assign(tables[r].size(), 0);
    for (const BatchedStep& b : st.program)
      for (int j : b.p2p) {
        const Action& a = tables[r][j];
        TRAINER_CHECK(a.peer >= 0 && a.peer < pp_size && a.peer != r, "{}: bad peer",
                      action_name(a, r));
        st.order.push_back(j);
      }
  }
  // The earliest unmatched op of rank r with `peer` (sends or receives), in
  // issue order: NCCL matches a pair's sends and receives in that order.
  auto first_open = [&](int r, int peer, bool send) {
    for (int j : ranks[r].order) {
      const Action& a = tables[r][j];
      if (!ranks[r].done[j] && a.peer == peer && is_send(a.kind) == send) return j;
    }
    return -1;
  };
  auto in_current_group = [&](int r, int j) {
    const RankRun& st = ranks[r];
    if (st.step >= st.program.size() || !st.in_group) return false;
    const std::vector<int>& g = st.program[st.step].p2p;
    return std::find(g.begin(), g.end(), j) != g.end();
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < pp_size; ++r) {
      RankRun& st = ranks[r];
      while (st.step < st.program.size()) {
        const BatchedStep& b = st.program[st.step];
        if (!st.in_group) {  // the compute completes at once
          st.in_group = true;
          ++st.step;
          progress = true;
          continue;
        }
        bool all = true;
        for (int i : b.p2p) {
          if (st.done[i]) continue;
          const Action& a = tables[r][i];
          const int q = a.peer;
          if (first_open(r, q, is_send(a.kind)) == i) {
            const int j = first_open(q, r, !is_send(a.kind));
            if (j >= 0 && in_current_group(q, j)) {
              TRAINER_CHECK(message(r, a) == message(q, tables[q][j]),
                            "{} would meet {}: the two ranks order their messages differently",
                            action_name(a, r), action_name(tables[q][j], q));
              st.done[i] = ranks[q].done[j] = 1;
              progress = true;
            }
          }
          all = all && st.done[i];
        }
        if (!all) break;
        if (b.compute >= 0) {
          st.in_group = false;
        } else {
          ++st.step;
        }
        progress = true;
      }
    }
  }
  std::string stuck;
  for (int r = 0; r < pp_size; ++r) {
    const RankRun& st = ranks[r];
    if (st.step >= st.program.size()) continue;
    for (int i : st.program[st.step].p2p)
      if (!st.done[i]) {
        if (!stuck.empty()) stuck += "; ";
        stuck += action_name(tables[r][i], r);
        break;
      }
  }
  return stuck;
}

namespace {

std::string join(const std::vector<int>& xs) {
  std::string s;
  for (int x : xs) {
    if (!s.empty()) s += ' ';
    s += std::to_string(x);
  }
  return s;
}

}  // namespace

std::string describe_schedule(int pp_size, int num_micro_batches, int virtual_stages) {
  if (pp_size == 1 && virtual_stages == 1)
    return fmt::format("pipeline: none (pp 1), {} micro-batches per step", num_micro_batches);
  std::vector<int> warmup, peak;
  for (int r = 0; r < pp_size; ++r) {
    const Schedule table = pipeline_schedule(pp_size, r, num_micro_batches, virtual_stages);
    warmup.push_back(warmup_forwards(pp_size, r, num_micro_batches, virtual_stages));
    peak.push_back(peak_in_flight(table));
  }
  const std::string name =
      virtual_stages == 1 ? fmt::format("1F1B, pp {}", pp_size)
                          : fmt::format("interleaved 1F1B, pp {} x {} virtual stages", pp_size,
                                        virtual_stages);
  const char* unit = virtual_stages == 1 ? "micro-batches" : "chunks";
  return fmt::format(
      "pipeline: {}, {} micro-batches per step; warm-up forwards per rank [{}]; peak in-flight {} "
      "per rank [{}]; bubble {:.1f}% of compute ((p-1)/(v*m) = {}/{})",
      name, num_micro_batches, join(warmup), unit, join(peak),
      100.0 * bubble_fraction(pp_size, num_micro_batches, virtual_stages), pp_size - 1,
      virtual_stages * num_micro_batches);
}

std::string describe_timeline(const std::vector<Schedule>& tables, const SimCosts& costs) {
  TRAINER_CHECK(costs.forward == std::floor(costs.forward) &&
                    costs.backward == std::floor(costs.backward) && costs.p2p == std::floor(costs.p2p),
                "describe_timeline needs whole-number costs");
  const SimResult sim = simulate(tables, costs);
  const int width = static_cast<int>(std::ceil(sim.makespan));
  std::string out;
  for (size_t r = 0; r < tables.size(); ++r) {
    std::string line(width, '.');
    for (size_t i = 0; i < tables[r].size(); ++i) {
      const Action& a = tables[r][i];
      if (sim.start[r][i] < 0) continue;
      if (a.kind != ActionKind::forward && a.kind != ActionKind::backward) continue;
      const int begin = static_cast<int>(sim.start[r][i]);
      const int len = static_cast<int>(a.kind == ActionKind::forward ? costs.forward : costs.backward);
      for (int t = begin; t < begin + len && t < width; ++t)
        line[t] = a.kind == ActionKind::forward ? static_cast<char>('0' + a.micro_batch % 10)
                                                : static_cast<char>('a' + a.micro_batch % 26);
    }
    out += fmt::format("rank {}: {}\n", r, line);
  }
  if (sim.deadlock) out += "deadlock: " + sim.stuck + "\n";
  return out;
}

}  // namespace trainer::parallel
