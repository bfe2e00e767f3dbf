"""The KV connector's store backend seam (dualpath.integrations._backend, issue 26 item 3): the
extra-config keys that select ``dualpath.KVStore`` (tiers) or ``dualpath.ClusterStore`` (cluster),
with a clear error naming each bad or missing key; and that a cluster store that cannot be reached
is a miss for the connector, never an exception out of the engine's step.

Unit speed: nothing here starts a store (an unreachable etcd endpoint stands for a dead cluster,
with a short retry deadline). The vLLM part runs where vLLM 0.33 is installed (.venv).
"""

import os

import pytest

import dualpath
from dualpath.integrations._backend import (
    ConfigError,
    backend,
    cluster_options,
    model_fingerprint,
    open_store,
)
from store_cluster import free_port, make_pki

NS = "vllm/model/bfloat16/auto/bs16/tp0of1"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A CA, a certificate and a transfer token (openssl; the store fixture's make_pki)."""
    return make_pki(tmp_path_factory.mktemp("backend") / "pki")


def cluster_extra(pki, **kw):
    extra = {"backend": "cluster", "etcd": "10.0.0.1:2379,10.0.0.2:2379", "cluster": "prod",
             "tls_cert": pki["cert"], "tls_key": pki["key"], "tls_ca": pki["ca"],
             "transfer_token_file": pki["token"]}
    extra.update(kw)
    return {k: v for k, v in extra.items() if v is not None}


def test_default_backend_is_the_node_tiers(pool_path):
    assert backend({}) == "tiers"
    with open_store({"pool_path": pool_path, "pool_size": 16 << 20}, NS) as store:
        assert isinstance(store, dualpath.KVStore)
        assert store.namespace == NS


def test_full_cluster_config_gives_the_client_options(pki):
    opts = cluster_options(cluster_extra(pki, replicas=2, host="gpu7", local_shm=False,
                                         shm_dir="/dev/shm", rpc_timeout=2, etcd_timeout=3), NS)
    assert opts == {"cluster": "prod", "etcd": "10.0.0.1:2379,10.0.0.2:2379",
                    "tls_cert": pki["cert"], "tls_key": pki["key"], "tls_ca": pki["ca"],
                    "transfer_token_file": pki["token"], "model_fingerprint":
                    model_fingerprint(NS), "host": "gpu7", "local_shm": False,
                    "shm_dir": "/dev/shm", "replicas": 2, "retry_deadline": 5.0,
                    "rpc_timeout": 2.0, "etcd_timeout": 3.0}


def test_fingerprint_follows_the_namespace(pki):
    # Same model and geometry: the same objects; another namespace (model, dtype, block size, TP
    # rank) never reads them. An explicit model_fingerprint wins.
    assert model_fingerprint(NS) == model_fingerprint(NS)
    assert model_fingerprint(NS) != model_fingerprint(NS.replace("tp0of1", "tp0of2"))
    assert 0 <= model_fingerprint(NS) < 1 << 64
    assert cluster_options(cluster_extra(pki, model_fingerprint=7), NS)["model_fingerprint"] == 7


def test_insecure_store_needs_no_tls_files():
    opts = cluster_options({"backend": "cluster", "etcd": "127.0.0.1:2379", "cluster": "c",
                            "insecure": True}, NS)
    assert opts["etcd_insecure"] and opts["master_insecure"]
    assert "tls_cert" not in opts


@pytest.mark.parametrize("change, key, words", [
    ({"backend": "clustre"}, "backend", "not one of tiers, cluster"),
    ({"etcd": None}, "etcd", "missing"),
    ({"etcd": ["10.0.0.1:2379"]}, "etcd", "must be a string"),
    ({"cluster": ""}, "cluster", "missing"),
    ({"tls_key": None}, "tls_key", "missing: the store is reached with mutual TLS"),
    ({"tls_ca": "/nonexistent/ca.crt"}, "tls_ca", "is not a readable file"),
    ({"transfer_token_file": "/nonexistent/token"}, "transfer_token_file", "not a readable"),
    ({"insecure": True}, "insecure", "together with tls_cert"),
    ({"insecure": "yes"}, "insecure", "must be true or false"),
    ({"pool_path": "/dev/shm/x"}, "pool_path", "node-tier key"),
    ({"store_path": "/mnt/kv"}, "store_path", "node-tier key"),
    ({"replicas": 4}, "replicas", "out of range"),
    ({"replicas": True}, "replicas", "must be an integer"),
    ({"replicas": 1.5}, "replicas", "must be an integer"),
    ({"retry_deadline": 0}, "retry_deadline", "out of range"),
    ({"etcd_timeout": "5"}, "etcd_timeout", "must be a number"),
    ({"model_fingerprint": -1}, "model_fingerprint", "out of range"),
    ({"local_shm": 1}, "local_shm", "must be true or false"),
    ({"host": 7}, "host", "must be a string"),
])
def test_bad_or_missing_key_is_named(pki, change, key, words):
    with pytest.raises(ConfigError) as e:
        open_store(cluster_extra(pki, **change), NS)
    assert e.value.key == key
    assert f"kv_connector_extra_config[{key!r}]" in str(e.value)
    assert words in str(e.value)


def dead_cluster(pki):
    """A ClusterStore whose etcd endpoint nothing listens on (a store that cannot be reached)."""
    extra = cluster_extra(pki, etcd=f"127.0.0.1:{free_port()}", retry_deadline=0.3,
                         etcd_timeout=0.3)
    return open_store(extra, NS)


def test_open_store_gives_a_cluster_client(pki):
    with dead_cluster(pki) as store:
        assert isinstance(store, dualpath.ClusterStore)
        assert store.model_fingerprint == model_fingerprint(NS)
        with pytest.raises(dualpath.Error):  # what the connector turns into a miss
            store.batch_exists([b"k" * 32])


def test_load_from_an_unreachable_store_is_a_load_error_not_a_crash(pki):
    """PagedLayers' batch get from a cluster store that never answers: every planned block is
    reported as a load error (vLLM recomputes it), the caches are untouched. Before, the store's
    exception went up through wait_for_layer_load and killed the engine's step."""
    torch = pytest.importorskip("torch")
    from dualpath.integrations._pages import PagedLayers

    caches = {f"layer{i}": torch.full((4, 2, 8), 7, dtype=torch.bfloat16) for i in range(2)}
    layers = PagedLayers(caches)
    with dead_cluster(pki) as store:
        load = layers.start_load(store, [bytes([i]) * 32 for i in range(3)])
        assert load.resolve([([0, 2], 0), ([3], 2)]) == {0, 2, 3}
    assert all(bool((kv == 7).all()) for kv in caches.values())


def vllm_config(extra):
    pytest.importorskip("vllm", reason="vLLM is installed in .venv only")
    from vllm.config import (
        CacheConfig,
        DeviceConfig,
        KVTransferConfig,
        ModelConfig,
        VllmConfig,
    )

    model_dir = os.path.join(os.path.dirname(__file__), "data", "qwen2.5-0.5b")
    model = ModelConfig(model=model_dir, tokenizer=model_dir, skip_tokenizer_init=True,
                        dtype="bfloat16", max_model_len=1024, seed=0)
    return VllmConfig(model_config=model,
                      cache_config=CacheConfig(block_size=16, enable_prefix_caching=True),
                      kv_transfer_config=KVTransferConfig(
                          kv_connector="DualPathConnector",
                          kv_connector_module_path="dualpath.integrations.vllm",
                          kv_role="kv_both", kv_connector_extra_config=extra),
                      device_config=DeviceConfig("cpu"))


def test_connector_refuses_a_bad_cluster_config_naming_the_key(pki):
    config = vllm_config(cluster_extra(pki, etcd=None))
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole

    from dualpath.integrations.vllm import DualPathConnector

    with pytest.raises(ConfigError, match=r"kv_connector_extra_config\['etcd'\]: missing"):
        DualPathConnector(config, KVConnectorRole.SCHEDULER)
    # P/D over the cluster store is not wired (the scheduler service probes the node tiers).
    config = vllm_config(cluster_extra(pki, transfer_listen="127.0.0.1:0",
                                       transfer_insecure=True))
    with pytest.raises(ConfigError, match="transfer_listen"):
        DualPathConnector(config, KVConnectorRole.SCHEDULER)


def test_connector_lookup_on_an_unreachable_store_is_a_miss(pki):
    """The scheduler side's prefix lookup against a cluster store that cannot be reached returns
    no external hit (the engine computes) instead of raising out of vLLM's scheduler."""
    extra = cluster_extra(pki, etcd=f"127.0.0.1:{free_port()}", retry_deadline=0.3,
                         etcd_timeout=0.3)
    config = vllm_config(extra)
    from vllm import SamplingParams
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
    from vllm.utils.hashing import sha256_cbor
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.request import Request

    from dualpath.integrations.vllm import DualPathConnector

    conn = DualPathConnector(config, KVConnectorRole.SCHEDULER)
    try:
        init_none_hash(sha256_cbor)
        req = Request(request_id="r", prompt_token_ids=list(range(100)),
                      sampling_params=SamplingParams(max_tokens=1), pooling_params=None,
                      block_hasher=get_request_block_hasher(16, sha256_cbor))
        assert conn.get_num_new_matched_tokens(req, 0) == (0, False)
    finally:
        conn.shutdown()
