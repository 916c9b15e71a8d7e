// All-ranks simulation of pipeline tables: every configuration runs to the
// end without deadlock, makespans match the closed forms of Narayanan et al.
// (2021), and the simulator itself catches broken tables.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>

#include "kernels/error.h"
#include "parallel/pipeline_schedule.h"

using namespace trainer;
using namespace trainer::parallel;

namespace {

void check_runs_to_end(const std::vector<Schedule>& tables, const SimResult& sim) {
  INFO(sim.stuck);
  REQUIRE_FALSE(sim.deadlock);
  for (size_t r = 0; r < tables.size(); ++r)
    for (double t : sim.start[r]) REQUIRE(t >= 0.0);
}

}  // namespace

// 1F1B makespan, derived: the last stage starts at (p - 1) f, then alternates
// forward and backward without idling (its next input was produced during
// its previous backward), m (f + b) in all; the last backward then walks back
// through p - 1 stages, (p - 1) b. Total (p - 1) f + m (f + b) + (p - 1) b.
TEST_CASE("1F1B: all ranks run to the end in (m + p - 1) * (f + b)", "[cpu]") {
  const SimCosts cost_cases[] = {{1, 2, 0}, {1, 1, 0}, {1, 3, 0}, {2, 3, 0}};
  for (int p : {1, 2, 4, 8})
    for (int m = 1; m <= 16; ++m) {
      const auto tables = all_schedules(p, m, 1);
      for (const SimCosts& c : cost_cases) {
        INFO("pp " << p << " m " << m << " f " << c.forward << " b " << c.backward);
        const SimResult sim = simulate(tables, c);
        check_runs_to_end(tables, sim);
        REQUIRE(sim.makespan == (m + p - 1) * (c.forward + c.backward));
        // The same statement as Megatron's bubble fraction: idle / ideal.
        const double ideal = m * (c.forward + c.backward);
        REQUIRE((sim.makespan - ideal) / ideal == Approx(bubble_fraction(p, m, 1)));
      }
    }
}

// Interleaved, with each chunk 1/v of a rank's layers (forward f, backward b
// per chunk): the ideal is v m (f + b) per rank and the paper's bubble is
// (p - 1)(f + b), v times smaller than 1F1B's (p - 1) v (f + b) on the same
// layers. So makespan = (v m + p - 1)(f + b) < 1F1B's (m + p - 1) v (f + b).
TEST_CASE("interleaved: all ranks run to the end, bubble v times smaller than 1F1B", "[cpu]") {
  for (int p : {2, 4, 8})
    for (int v : {2, 4})
      for (int m = p; m <= 16; m += p) {
        const auto tables = all_schedules(p, m, v);
        for (double b : {1.0, 2.0}) {
          INFO("pp " << p << " v " << v << " m " << m << " b " << b);
          const SimCosts chunk_costs{1.0, b, 0.0};
          const SimResult sim = simulate(tables, chunk_costs);
          check_runs_to_end(tables, sim);
          REQUIRE(sim.makespan == (v * m + p - 1) * (1.0 + b));
          const double ideal = v * m * (1.0 + b);
          REQUIRE((sim.makespan - ideal) / ideal == Approx(bubble_fraction(p, m, v)));
          const SimResult plain = simulate(all_schedules(p, m, 1), {1.0 * v, b * v, 0.0});
          REQUIRE(sim.makespan < plain.makespan);
        }
      }
}

TEST_CASE("with p2p latency the tables still run, no faster than a round trip", "[cpu]") {
  for (int p : {2, 4, 8})
    for (int v : {1, 2})
      for (int m : {p, 2 * p}) {
        INFO("pp " << p << " v " << v << " m " << m);
        const auto tables = all_schedules(p, m, v);
        const SimResult fast = simulate(tables, {1, 2, 0});
        const SimResult slow = simulate(tables, {1, 2, 0.5});
        check_runs_to_end(tables, slow);
        REQUIRE(slow.makespan >= fast.makespan);
        // Micro-batch 0 must go through all v p stages and back: v p (f + b)
        // of compute and 2 (v p - 1) hops.
        REQUIRE(slow.makespan >= v * p * 3.0 + 2 * (v * p - 1) * 0.5);
      }
}

TEST_CASE("timeline of 1F1B pp 4, m 8 as in the header", "[cpu]") {
  // Digit: forward of that micro-batch (1 unit), letter: its backward (2).
  // Rank 0 runs F0..F3, then waits for B0 to come back through ranks 3, 2, 1
  // (finished at 6, 8, 10); in cool-down each backward waits one unit for
  // rank 1's. Rank 3 starts at 3 and never idles until its last backward.
  const std::string chart = describe_timeline(all_schedules(4, 8, 1));
  INFO(chart);
  REQUIRE(chart.rfind("rank 0: 0123......aa4bb5cc6dd7ee.ff.gg.hh\n", 0) == 0);
  REQUIRE(chart.find("rank 3: ...0aa1bb2cc3dd4ee5ff6gg7hh......\n") != std::string::npos);
}

TEST_CASE("the simulator reports deadlocks and rejects broken tables", "[cpu]") {
  SECTION("waiting for a gradient before sending the activation deadlocks") {
    auto tables = all_schedules(2, 1, 1);
    // rank 0: forward, send_forward, recv_backward, backward -> swap the middle two.
    REQUIRE(tables[0][1].kind == ActionKind::send_forward);
    std::swap(tables[0][1], tables[0][2]);
    const SimResult sim = simulate(tables);
    REQUIRE(sim.deadlock);
    CHECK(sim.stuck.find("rank 0: recv_backward(micro-batch 0, chunk 0)") != std::string::npos);
    CHECK(sim.stuck.find("rank 1: recv_forward(micro-batch 0, chunk 0)") != std::string::npos);
  }
  SECTION("a send to the wrong rank") {
    auto tables = all_schedules(4, 4, 1);
    for (Action& a : tables[1])
      if (a.kind == ActionKind::send_forward) a.peer = 3;
    CHECK_THROWS_WITH(simulate(tables), Catch::Contains("stage 2 lives on rank 2"));
  }
  SECTION("a forward without its input") {
    auto tables = all_schedules(2, 2, 1);
    tables[1].erase(tables[1].begin());  // rank 1's first recv_forward
    CHECK_THROWS_WITH(simulate(tables), Catch::Contains("input not received"));
  }
  SECTION("a backward before its forward") {
    auto tables = all_schedules(1, 2, 1);
    std::swap(tables[0][0], tables[0][1]);  // F0 B0 -> B0 F0
    CHECK_THROWS_WITH(simulate(tables), Catch::Contains("before its forward"));
  }
  SECTION("a micro-batch forwarded twice") {
    auto tables = all_schedules(1, 2, 1);
    tables[0][2].micro_batch = 0;  // F0 B0 F1 B1 -> F0 B0 F0 B1
    CHECK_THROWS_WITH(simulate(tables), Catch::Contains("ran twice"));
  }
  SECTION("an activation sent and never received") {
    auto tables = all_schedules(2, 1, 1);
    // Rank 1 skips its whole part; rank 0 then waits for a gradient forever.
    tables[1].clear();
    const SimResult sim = simulate(tables);
    REQUIRE(sim.deadlock);
  }
}

// NCCL's semantics: a send may wait for its receive and a pair's messages
// match in issue order, so the executor runs batched_program().
namespace {

bool is_send(ActionKind k) { return k == ActionKind::send_forward || k == ActionKind::send_backward; }

// The program as a table in the order MPI runs it (each group's isends, then
// its receives, then the compute), for simulate().
Schedule flattened(const Schedule& t) {
  Schedule out;
  for (const BatchedStep& st : batched_program(t)) {
    for (int j : st.p2p)
      if (is_send(t[j].kind)) out.push_back(t[j]);
    for (int j : st.p2p)
      if (!is_send(t[j].kind)) out.push_back(t[j]);
    if (st.compute >= 0) out.push_back(t[st.compute]);
  }
  return out;
}

void check_batched(int p, int m, int v) {
  INFO("pp " << p << " m " << m << " v " << v);
  const std::vector<Schedule> tables = all_schedules(p, m, v);
  REQUIRE(simulate_batched(tables) == "");
  // The same programs under MPI: no deadlock, every input in time, and no
  // slower than the tables themselves.
  std::vector<Schedule> flat;
  for (const Schedule& t : tables) {
    flat.push_back(flattened(t));
    REQUIRE(flat.back().size() == t.size());
  }
  const SimResult table_sim = simulate(tables), flat_sim = simulate(flat);
  check_runs_to_end(flat, flat_sim);
  REQUIRE(flat_sim.makespan <= table_sim.makespan);
}

}  // namespace

TEST_CASE("batched p2p: every 1F1B and interleaved table runs under NCCL's semantics", "[cpu]") {
  for (int p : {2, 3, 4, 8, 16})
    for (int m = 1; m <= 2 * p + 3; ++m) check_batched(p, m, 1);
  for (int p : {2, 3, 4, 8, 16})
    for (int v : {2, 3, 4})
      for (int m = p; m <= 4 * p; m += p) check_batched(p, m, v);
}

TEST_CASE("batched p2p: every send and receive once, receives before their compute", "[cpu]") {
  for (int v : {1, 2})
    for (int r = 0; r < 4; ++r) {
      const Schedule t = pipeline_schedule(4, r, 8, v);
      std::vector<int> seen(t.size(), 0);
      for (const BatchedStep& st : batched_program(t)) {
        for (int j : st.p2p) {
          REQUIRE(is_p2p(t[j].kind));
          ++seen[j];
        }
        if (st.compute >= 0) {
          REQUIRE_FALSE(is_p2p(t[st.compute].kind));
          ++seen[st.compute];
          // The receives the table puts right before this compute went earlier or now.
          for (int j = st.compute - 1; j >= 0 && is_p2p(t[j].kind); --j)
            if (!is_send(t[j].kind)) REQUIRE(seen[j] == 1);
        }
      }
      for (int c : seen) REQUIRE(c == 1);
    }
}

TEST_CASE("batched p2p: interleaved steady steps are one group, 1F1B pairs neighbours", "[cpu]") {
  // 1F1B rank 0 of pp 2, m 4: F0 [sf0] F1 [sf1 rb0] B0 F2 [sf2 rb1] B1 ...
  const Schedule t = schedule_1f1b(2, 0, 4);
  const std::vector<BatchedStep> prog = batched_program(t);
  auto kinds = [&](const BatchedStep& st) {
    std::vector<ActionKind> k;
    for (int j : st.p2p) k.push_back(t[j].kind);
    return k;
  };
  REQUIRE(t[prog[2].compute].kind == ActionKind::backward);
  CHECK(kinds(prog[2]) == std::vector<ActionKind>{ActionKind::send_forward, ActionKind::recv_backward});
  // Interleaved pp 4 v 2 m 8, rank 1, in its steady phase: a group before a
  // forward holds the previous step's sends, its input and the next
  // backward's gradient; the backward after it gets no group.
  const Schedule u = schedule_interleaved(4, 1, 8, 2);
  const std::vector<BatchedStep> q = batched_program(u);
  int four_way = 0;
  for (size_t k = 0; k + 1 < q.size(); ++k) {
    if (q[k].compute < 0 || u[q[k].compute].kind != ActionKind::forward) continue;
    std::vector<ActionKind> g;
    for (int j : q[k].p2p) g.push_back(u[j].kind);
    if (g == std::vector<ActionKind>{ActionKind::send_forward, ActionKind::send_backward,
                                     ActionKind::recv_forward, ActionKind::recv_backward}) {
      ++four_way;
      CHECK(q[k + 1].p2p.empty());
      CHECK(u[q[k + 1].compute].kind == ActionKind::backward);
    }
  }
  CHECK(four_way > 0);
}

TEST_CASE("batched p2p: the simulator finds deadlocks and mismatched message orders", "[cpu]") {
  SECTION("each rank waits for the other's send") {
    // Rank 0 needs a gradient before it sends the activation that produces it.
    std::vector<Schedule> t(2);
    t[0] = {{ActionKind::forward, 0, 0},
            {ActionKind::recv_backward, 0, 0, 1},
            {ActionKind::backward, 0, 0},
            {ActionKind::send_forward, 0, 0, 1}};
    t[1] = {{ActionKind::recv_forward, 0, 0, 0},
            {ActionKind::forward, 0, 0},
            {ActionKind::backward, 0, 0},
            {ActionKind::send_backward, 0, 0, 0}};
    const std::string stuck = simulate_batched(t);
    CHECK(stuck.find("rank 0: recv_backward(micro-batch 0, chunk 0)") != std::string::npos);
    CHECK(stuck.find("rank 1: recv_forward(micro-batch 0, chunk 0)") != std::string::npos);
  }
  SECTION("two activations received in the other order than sent") {
    std::vector<Schedule> t(2);
    t[0] = {{ActionKind::forward, 0, 0},
            {ActionKind::send_forward, 0, 0, 1},
            {ActionKind::forward, 1, 0},
            {ActionKind::send_forward, 1, 0, 1}};
    t[1] = {{ActionKind::recv_forward, 1, 0, 0},
            {ActionKind::recv_forward, 0, 0, 0},
            {ActionKind::forward, 1, 0},
            {ActionKind::forward, 0, 0}};
    CHECK_THROWS_WITH(simulate_batched(t), Catch::Contains("order their messages differently"));
  }
}
