"""dualpath: a node's KV-cache tiers for LLM engines.

- ``dualpath.KVStore``: the node's shared-memory pool plus a persistent tier on any POSIX or
  distributed file system, with the verbs engine connectors use (Mooncake's store shape).
- ``dualpath.ClusterStore``: the client of the distributed KV store (``dualpath store master`` and
  ``dualpath store node`` processes, found through etcd), with the same verbs.
- ``dualpath.kv``: vLLM-compatible block hashing (``sha256_cbor``, byte-exact) and model presets.
- ``dualpath.TransferEngine``: one-sided KV transfers between processes (UCX), with notices;
  ``dualpath.SchedulerClient``: the scheduler service's client (placement calls);
- ``dualpath.integrations.vllm.DualPathConnector`` and
  ``dualpath.integrations.sglang.DualPathHiCacheStorage``: the engine plug-ins;
  ``python -m dualpath.proxy``: the OpenAI-compatible front door for P/D disaggregation.

See docs/python.md.
"""

from dualpath import _core
from dualpath import kv
from dualpath._core import Error, MAX_VALUE_BYTES, SchedulerClient, TransferEngine, error_name
from dualpath.cluster_store import ClusterStore
from dualpath.store import Handle, KVStore

__all__ = ["ClusterStore", "Error", "Handle", "KVStore", "MAX_VALUE_BYTES", "SchedulerClient",
           "TransferEngine", "error_name", "kv"]
__version__ = "0.1.0"
