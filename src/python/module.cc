// The extension module dualpath._core: the kv bindings (hasher, presets), KVStore,
// ClusterStore (the distributed store's client), TransferEngine (one-sided KV transfers between
// instances) and SchedulerClient (the scheduler service's client, placement calls). The Python
// package (python/dualpath/) wraps it; see docs/python.md.
#include <nanobind/nanobind.h>

#include "python/convert.h"

namespace dualpath::python {
void BindKv(nb::module_& m);
void BindStore(nb::module_& m);
void BindClusterStore(nb::module_& m);
void BindTransfer(nb::module_& m);
void BindControl(nb::module_& m);
}  // namespace dualpath::python

NB_MODULE(_core, m) {
  m.doc() = "dualpath native core (use the `dualpath` package)";
  dualpath::python::InitErrors(m);
  dualpath::python::BindKv(m);
  dualpath::python::BindStore(m);
  dualpath::python::BindClusterStore(m);
  dualpath::python::BindTransfer(m);
  dualpath::python::BindControl(m);
}
