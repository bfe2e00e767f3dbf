# `dualpath store master`: the StoreMaster gRPC service around MasterState, leader election and
# node membership through etcd (dualpath/store/master_server.h, docs/store.md).
dualpath_library(store_master
  SOURCES
    master_server.cc
  PUBLIC_DEPS dualpath_common dualpath_store dualpath_coord
  PRIVATE_DEPS dualpath_common_grpc dualpath_store_proto fmt::fmt)
target_link_libraries(dualpath PRIVATE dualpath_store_master)

# Against a real etcd (Debian's /usr/bin/etcd; skipped, saying so, when it is not installed) and
# real gRPC; the store nodes are test doubles of the StoreNode service inside the test.
dualpath_test(store_master_test
  SOURCES
    master_server_test.cc
    # A real etcd on free localhost ports (dualpath/coord/etcd_test_server.h), as coord's tests.
    ${PROJECT_SOURCE_DIR}/src/coord/etcd_test_server.cc
  DEPS dualpath_store_master dualpath_store_proto dualpath_coord dualpath_common_grpc
  LABELS store coord
  TIMEOUT 300)
