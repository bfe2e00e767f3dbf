# Copies one of etcd's .proto files (as Debian's golang-etcd-server-dev ships them) with what only
# Go needs stripped, so that the project's protoc and grpc_cpp_plugin can compile it:
#   - `import "gogoproto/gogo.proto";` and the `option (gogoproto.*) = ...;` lines: gogo/protobuf's
#     Go code generator options (marshalers, getters); no effect on the wire format;
#   - `import "google/api/annotations.proto";` and the `option (google.api.http) = { ... };` blocks
#     of rpc.proto: the grpc-gateway's HTTP/JSON mapping; no effect on the gRPC API.
# Messages, fields, numbers and services are left byte for byte as etcd wrote them. Fails if any
# gogoproto or google.api reference is left (a newer etcd using another option is then noticed
# at build time instead of as a protoc error about a missing import).
#   cmake -DIN=<etcd .proto> -DOUT=<copy> -P strip_etcd_proto.cmake
if(NOT IN OR NOT OUT)
  message(FATAL_ERROR "strip_etcd_proto.cmake: pass -DIN=<etcd .proto> -DOUT=<copy>")
endif()
file(READ "${IN}" text)
string(REGEX REPLACE "import \"gogoproto/gogo\\.proto\";[ \t]*\n" "" text "${text}")
string(REGEX REPLACE "import \"google/api/annotations\\.proto\";[ \t]*\n" "" text "${text}")
string(REGEX REPLACE "option \\(gogoproto\\.[a-z_]+\\) = [a-z]+;[ \t]*\n" "" text "${text}")
# The HTTP option blocks hold no ';' (only `post: ".."`, `body: ".."` and nested
# `additional_bindings { .. }`), so [^;]* stops at the block's closing `};`.
string(REGEX REPLACE "option \\(google\\.api\\.http\\) = {[^;]*};" "" text "${text}")
if(text MATCHES "gogoproto|google\\.api")
  message(FATAL_ERROR "strip_etcd_proto.cmake: ${IN} still refers to gogoproto or google.api "
                      "after stripping; extend this script for the new option")
endif()
file(WRITE "${OUT}" "// Generated at build time from ${IN} by src/coord/proto/strip_etcd_proto.cmake\n// (gogoproto and google.api options removed). Do not edit.\n${text}")
