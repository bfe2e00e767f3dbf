"""The store behind an engine's KV connector, chosen by its extra config (issue 26 item 3).

Two backends give the connector the same verbs (``batch_exists``, ``batch_is_exist``,
``batch_get_async`` into the connector's staging rows, ``batch_put``, ``stats``, ``close``; every
block read back checked against its checksum, a miss or a rejected object is a miss):

  ``"backend": "tiers"`` (the default): ``dualpath.KVStore``, this node's shared-memory pool and
      persistent tier (``pool_path``, ``store_path``, ``pool_size``, ``sync``). Instances share
      KV only through the same pool file or the same (possibly distributed) file system.
  ``"backend": "cluster"``: ``dualpath.ClusterStore``, the distributed store's client (etcd, a
      leader ``dualpath store master``, ``dualpath store node`` DRAM tiers). Instances on any
      node share KV through the store nodes, over the transfer engine, without a shared file
      system (what Mooncake's store connector does, seed 003).

No engine import here: the vLLM connector calls ``open_store`` and the config parsing is tested
without vLLM (tests/python/test_connector_backend.py).
"""

from __future__ import annotations

import hashlib
import os
from typing import Any, Mapping

__all__ = ["BACKENDS", "CLUSTER_KEYS", "TIER_KEYS", "ConfigError", "backend", "cluster_options",
           "model_fingerprint", "open_store"]

BACKENDS = ("tiers", "cluster")
# Keys that only the node tiers use: given with the cluster backend they would be silently
# ignored, so they are refused instead (the user meant the other backend, or left them over).
TIER_KEYS = ("pool_path", "store_path", "pool_size", "sync")
# The cluster backend's keys (docs/integrations/vllm.md "Cluster store backend").
CLUSTER_KEYS = ("etcd", "cluster", "tls_cert", "tls_key", "tls_ca", "insecure",
                "transfer_token_file", "model_fingerprint", "host", "local_node", "local_shm",
                "shm_dir", "ucx_tls", "replicas", "retry_deadline", "rpc_timeout", "etcd_timeout")
_TLS_KEYS = ("tls_cert", "tls_key", "tls_ca")
# A scheduler-side lookup blocks the engine's step: a store that cannot be reached is a miss after
# this long, not after ClusterStore's own 15 s default.
_DEFAULT_RETRY_DEADLINE_S = 5.0


class ConfigError(ValueError):
    """A bad or missing kv_connector_extra_config key; the message names it."""

    def __init__(self, key: str, why: str) -> None:
        super().__init__(f"kv_connector_extra_config[{key!r}]: {why}")
        self.key = key


def backend(extra: Mapping[str, Any]) -> str:
    """The backend the extra config selects ("tiers" when ``backend`` is absent)."""
    name = extra.get("backend", "tiers")
    if name not in BACKENDS:
        raise ConfigError("backend", f"{name!r} is not one of {', '.join(BACKENDS)}")
    return name


def model_fingerprint(namespace: str) -> int:
    """The ClusterStore model fingerprint of a connector namespace (the first 8 bytes of its
    SHA-256): instances with the same model, dtypes, block size and TP rank share objects, other
    models never do, as with the tiers' per-namespace directories."""
    return int.from_bytes(hashlib.sha256(namespace.encode()).digest()[:8], "little")


def _str(extra: Mapping[str, Any], key: str, required: bool = False) -> str | None:
    value = extra.get(key)
    if value is None or value == "":
        if required:
            raise ConfigError(key, "missing (required with \"backend\": \"cluster\")")
        return None
    if not isinstance(value, str):
        raise ConfigError(key, f"must be a string, got {type(value).__name__} {value!r}")
    return value


def _file(extra: Mapping[str, Any], key: str) -> str | None:
    path = _str(extra, key)
    if path is not None and not os.access(path, os.R_OK):
        raise ConfigError(key, f"{path!r} is not a readable file")
    return path


def _number(extra: Mapping[str, Any], key: str, kind: type, lo: float, hi: float) -> Any:
    value = extra[key]
    # bool is an int in Python; "replicas": true is a typo, not 1.
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            (kind is int and not isinstance(value, int)):
        raise ConfigError(key, f"must be {'an integer' if kind is int else 'a number'}, got "
                               f"{value!r}")
    if not lo <= value <= hi:
        raise ConfigError(key, f"{value!r} is out of range [{lo:g}, {hi:g}]")
    return kind(value)


def _bool(extra: Mapping[str, Any], key: str) -> bool:
    value = extra[key]
    if not isinstance(value, bool):
        raise ConfigError(key, f"must be true or false, got {value!r}")
    return value


def cluster_options(extra: Mapping[str, Any], namespace: str) -> dict[str, Any]:
    """``dualpath.ClusterStore`` keyword arguments (with ``cluster`` and ``etcd``) from the extra
    config of a ``"backend": "cluster"`` connector. Raises ConfigError naming the first bad or
    missing key; nothing is contacted."""
    for key in TIER_KEYS:
        if key in extra:
            raise ConfigError(key, "a node-tier key; it has no effect with \"backend\": "
                                   "\"cluster\" (remove it, or use \"backend\": \"tiers\")")
    opts: dict[str, Any] = {"cluster": _str(extra, "cluster", required=True),
                            "etcd": _str(extra, "etcd", required=True)}
    tls = {k: _file(extra, k) for k in _TLS_KEYS}
    insecure = _bool(extra, "insecure") if "insecure" in extra else False
    given = [k for k, v in tls.items() if v is not None]
    if insecure and given:
        raise ConfigError("insecure", f"true together with {given[0]}: choose TLS or plaintext")
    if not insecure and len(given) != len(_TLS_KEYS):
        missing = next(k for k in _TLS_KEYS if tls[k] is None)
        raise ConfigError(missing, "missing: the store is reached with mutual TLS (give "
                                   "tls_cert, tls_key and tls_ca, the files `cluster up --store` "
                                   "prints) unless \"insecure\": true")
    if insecure:
        opts.update(etcd_insecure=True, master_insecure=True)
    else:
        opts.update(tls)
    token = _file(extra, "transfer_token_file")
    if token is not None:
        opts["transfer_token_file"] = token
    if "model_fingerprint" in extra:
        opts["model_fingerprint"] = _number(extra, "model_fingerprint", int, 0, (1 << 64) - 1)
    else:
        opts["model_fingerprint"] = model_fingerprint(namespace)
    for key in ("host", "shm_dir", "ucx_tls"):
        if key in extra:
            if not isinstance(extra[key], str):
                raise ConfigError(key, f"must be a string, got {extra[key]!r}")
            opts[key] = extra[key]
    if "local_shm" in extra:
        opts["local_shm"] = _bool(extra, "local_shm")
    if "local_node" in extra:
        opts["local_node"] = _number(extra, "local_node", int, 0, (1 << 32) - 1)
    if "replicas" in extra:
        opts["replicas"] = _number(extra, "replicas", int, 1, 3)
    opts["retry_deadline"] = (_number(extra, "retry_deadline", float, 0.001, 3600)
                              if "retry_deadline" in extra else _DEFAULT_RETRY_DEADLINE_S)
    for key in ("rpc_timeout", "etcd_timeout"):
        if key in extra:
            opts[key] = _number(extra, key, float, 0.001, 3600)
    return opts


def open_store(extra: Mapping[str, Any], namespace: str):
    """The connector's store: a ``KVStore`` (tiers) or a ``ClusterStore`` (cluster)."""
    import dualpath

    if backend(extra) == "cluster":
        opts = cluster_options(extra, namespace)
        return dualpath.ClusterStore(opts.pop("cluster"), opts.pop("etcd"), **opts)
    pool_path = extra.get("pool_path", "/dev/shm/dualpath-vllm") or None
    return dualpath.KVStore(
        pool_path,
        extra.get("store_path") or None,
        pool_size=int(extra.get("pool_size", 4 << 30)),
        namespace=namespace,
        sync=extra.get("sync", "data"),
    )
