#include "system_check.h"

#include <chrono>

#include "dualpath/model/ref_model.h"
#include "dualpath/replay/checker.h"

namespace dualpath::replay {

Result<std::string> ResolveModelSpec(const std::string& spec) {
  ASSIGN_OR_RETURN(model::RefModelConfig cfg, model::RefModelConfig::Parse(spec));
  RETURN_IF_ERROR(cfg.Validate());
  return cfg.ToString();
}

Result<uint32_t> ModelVocab(const std::string& spec) {
  ASSIGN_OR_RETURN(model::RefModelConfig cfg, model::RefModelConfig::Parse(spec));
  return cfg.vocab;
}

Status CheckRuns(const std::string& spec, const ReplayWorkload& workload, unsigned threads,
                 std::vector<SystemRun>& runs, std::ostream& progress) {
  bool any = false;
  for (const SystemRun& r : runs) any = any || r.system != "oracle";
  if (!any) return Status::Ok();
  ASSIGN_OR_RETURN(model::RefModelConfig cfg, model::RefModelConfig::Parse(spec));
  ASSIGN_OR_RETURN(std::unique_ptr<model::RefModel> m, model::RefModel::Create(cfg));
  const auto t0 = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(References refs, ComputeReferences(workload, *m, threads));
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  progress << "check: recomputed " << workload.requests << " requests in " << secs << " s\n";
  for (SystemRun& r : runs) {
    if (r.system == "oracle") continue;
    const CheckResult c = CheckRecords(workload, refs, r.replay.records);
    r.mismatches = c.mismatches;
    r.mismatched_ids = c.mismatched_ids;
    progress << r.system << ": " << c.checked << " results checked, " << c.mismatches
             << " mismatches\n";
  }
  return Status::Ok();
}

}  // namespace dualpath::replay
