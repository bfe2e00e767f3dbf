// The simulator's event loop core: EventQueue (4-ary heap, issue 27) against the binary
// std::push_heap queue it replaced (sim/binary_heap_event_queue.h), on the same operation stream in
// the same process. bench/sim/event_queue_ratio.sh prints new / old per queue size.
//
// One item = one Pop() and one Push() at a later time (the "hold" model of a discrete-event
// simulation: every event handled schedules about one more). The queue holds `size` events, as
// the simulator's queue does during a run (48P96D x 48K agents: ~48K pending arrivals at the
// start, a few thousand later). Times are drawn from a seeded table with many equal values, so
// ties (broken by push order) are common, as with the simulator's zero-delay events.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <vector>

#include "dualpath/sim/event_queue.h"
#include "sim/binary_heap_event_queue.h"

namespace dualpath::sim {
namespace {

std::vector<double> Delays() {
  std::mt19937_64 rng(27);
  std::vector<double> d(1 << 16);
  for (double& x : d) x = static_cast<double>(rng() % 64) * 0.005;  // 0 .. 0.315 s, 64 values
  return d;
}

template <typename Queue>
void BM_Hold(benchmark::State& state) {
  const auto size = static_cast<size_t>(state.range(0));
  const std::vector<double> delays = Delays();
  Queue q;
  size_t k = 0;
  for (size_t i = 0; i < size; ++i) q.Push(delays[k++ & 0xffff], 0, 0, i);
  uint64_t sum = 0;
  for (auto _ : state) {
    const Event e = q.Pop();
    sum += e.b;
    q.Push(e.time + delays[k++ & 0xffff], e.kind, e.a, e.b);
  }
  benchmark::DoNotOptimize(sum);
  state.SetItemsProcessed(state.iterations());
}

BENCHMARK_TEMPLATE(BM_Hold, EventQueue)->Name("EventQueue")->Arg(64)->Arg(4096)->Arg(65536);
BENCHMARK_TEMPLATE(BM_Hold, BinaryHeapEventQueue)
    ->Name("BinaryHeap")
    ->Arg(64)
    ->Arg(4096)
    ->Arg(65536);

}  // namespace
}  // namespace dualpath::sim

BENCHMARK_MAIN();
