# Test of strip_etcd_proto.cmake on the etcd rpc.proto the build uses (CTest coord_strip_proto):
# with KEEP_SERVICES=KV,Watch,Lease the copy keeps those services and the messages they use, drops
# the other services, their messages and the auth.proto import; without it, every service stays;
# an unknown service is an error that names it.
#   cmake -DSCRIPT=<strip_etcd_proto.cmake> -DRPC=<etcd rpc.proto> -DWORK=<dir> -P <this>
cmake_minimum_required(VERSION 3.25)
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
function(expect what text regex)
  if(NOT text MATCHES "${regex}")
    message(FATAL_ERROR "coord_strip_proto: ${what}: no match for '${regex}'")
  endif()
endfunction()
function(expect_not what text regex)
  if(text MATCHES "${regex}")
    message(FATAL_ERROR "coord_strip_proto: ${what}: unexpected match for '${regex}'")
  endif()
endfunction()

execute_process(COMMAND ${CMAKE_COMMAND} -DIN=${RPC} -DOUT=${WORK}/trim.proto
                        -DKEEP_SERVICES=KV,Watch,Lease -P ${SCRIPT} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "coord_strip_proto: stripping with KEEP_SERVICES failed (${rc})")
endif()
file(READ ${WORK}/trim.proto trim)
foreach(kept "service KV {" "service Watch {" "service Lease {" "\nmessage TxnRequest {"
             "\nmessage Compare {" "\nmessage WatchCreateRequest {" "\nmessage ResponseHeader {"
             "\nmessage LeaseKeepAliveResponse {" "import \"etcd/mvcc/mvccpb/kv.proto\";")
  string(FIND "${trim}" "${kept}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "coord_strip_proto: the trimmed copy lost '${kept}'")
  endif()
endforeach()
expect_not("trimmed" "${trim}" "service (Cluster|Maintenance|Auth)|message (Member|Alarm|Auth|Snapshot)")
# (after the copy's own two-line header, which names what was removed)
string(REGEX REPLACE "^//[^\n]*\n//[^\n]*\n" "" trim_body "${trim}")
expect_not("trimmed" "${trim_body}" "auth\\.proto|authpb\\.|gogoproto|google\\.api")
execute_process(COMMAND ${CMAKE_COMMAND} -DIN=${RPC} -DOUT=${WORK}/full.proto -P ${SCRIPT}
                RESULT_VARIABLE rc)
file(READ ${WORK}/full.proto full)
expect("whole" "${full}" "service Cluster {")
expect("whole" "${full}" "service Auth {")
expect("whole" "${full}" "import \"etcd/auth/authpb/auth.proto\";")

# Field lines of a kept message are byte for byte the unfiltered copy's (a ';' and a '[' survive the list work).
string(REGEX MATCH "message RangeRequest {[^}]*}" orig_range "${full}")
string(REGEX MATCH "message RangeRequest {[^}]*}" trim_range "${trim}")
if(NOT orig_range OR NOT orig_range STREQUAL trim_range)
  message(FATAL_ERROR "coord_strip_proto: RangeRequest differs from etcd's:\n${trim_range}")
endif()

execute_process(COMMAND ${CMAKE_COMMAND} -DIN=${RPC} -DOUT=${WORK}/bad.proto
                        -DKEEP_SERVICES=KV,Nope -P ${SCRIPT}
                RESULT_VARIABLE rc ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "coord_strip_proto: KEEP_SERVICES=KV,Nope succeeded")
endif()
expect("unknown service" "${err}" "no service 'Nope'")
message(STATUS "coord_strip_proto: ok")
