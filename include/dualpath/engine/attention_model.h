// The reference model's §6.2 attention time model: what a prefill engine's sched::PackRanks plans
// with before it has measured its own ranks (and all along with --attention-model fixed), and the
// baseline the batch stats compare the calibrated model's error with (docs/engine.md "Prefill
// batching"). One definition, shared by the engine and bench/engine/rank_balance_bench.
//
// Pure function. Thread safety: reentrant.
#pragma once

#include "dualpath/model/ref_model.h"
#include "dualpath/sched/batch.h"

namespace dualpath::engine {

// Fitted once to the rank CPU times of ForwardLayerBatch for the default shape (4 heads of 32,
// dev build) and scaled with the head shape: one layer on one rank.
sched::AttentionTimeModel ReferenceAttentionModel(const model::RefModelConfig& c);

}  // namespace dualpath::engine
