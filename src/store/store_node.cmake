# store_node (issue 16): `dualpath store node` (StoreNode: the DRAM tier file, membership, joins,
# the StoreNode gRPC service) and the client library (StoreClient). docs/store.md "Store node and
# client". include()d by CMakeLists.txt in this folder.
dualpath_library(store_node
  SOURCES
    client.cc
    client_data.cc
    node.cc
    node_shm.cc
    node_table.cc
  PUBLIC_DEPS dualpath_common dualpath_kv dualpath_store dualpath_coord dualpath_transfer
  PRIVATE_DEPS dualpath_common_grpc dualpath_store_proto fmt::fmt)

# The replica table's rules and the tier file (no etcd, no network).
dualpath_test(store_node_test
  SOURCES
    node_table_test.cc
  DEPS dualpath_store_node dualpath_store_proto
  LABELS store tsan)

# Against a real etcd (dualpath/coord/etcd_test_server.h; skipped, saying so, when it is not
# installed), real UCX (tcp on loopback) and real gRPC: the nodes and clients with a fake master
# inside the test (node_client_test.cc) and with the real MasterServer (node_master_test.cc).
dualpath_test(store_node_etcd_test
  SOURCES
    node_client_test.cc
    node_master_test.cc
    ${PROJECT_SOURCE_DIR}/src/coord/etcd_test_server.cc
  DEPS dualpath_store_node dualpath_store_master dualpath_store dualpath_store_proto dualpath_coord
       dualpath_common_grpc oversize_request
  LABELS store
  TIMEOUT 300)
if(TARGET store_node_etcd_test)
  add_dependencies(store_node_etcd_test grpc_oversize_client)  # issue 25 item 7 (tests/lib)
endif()

# `dualpath store node` (src/cli/cmd_store.cc) runs a StoreNode.
target_link_libraries(dualpath PRIVATE dualpath_store_node)

# UCX memory events off, as for transfer_test (src/transfer/CMakeLists.txt: libucm's madvise hook
# segfaults under ThreadSanitizer; tcp needs no memory events). Not labelled tsan: under the tsan
# preset the binary passes (2 runs), but one run reported a race inside gRPC's client status
# handling on coord's etcd watch thread (inlined grpcpp frames that cmake/tsan.supp does not match).
if(TARGET store_node_etcd_test)
  set_property(TEST store_node_etcd_test APPEND PROPERTY ENVIRONMENT "UCX_MEM_EVENTS=no")
endif()
