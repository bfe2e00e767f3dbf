# Copies one of etcd's .proto files (as Debian's golang-etcd-server-dev ships them) with what only
# Go needs stripped, so that the project's protoc and grpc_cpp_plugin can compile it:
#   - `import "gogoproto/gogo.proto";` and the `option (gogoproto.*) = ...;` lines: gogo/protobuf's
#     Go code generator options (marshalers, getters); no effect on the wire format;
#   - `import "google/api/annotations.proto";` and the `option (google.api.http) = { ... };` blocks
#     of rpc.proto: the grpc-gateway's HTTP/JSON mapping; no effect on the gRPC API.
# With -DKEEP_SERVICES=A,B,... (rpc.proto: KV,Watch,Lease) it also drops the other services and
# every top-level message and enum that no kept service reaches (the Cluster, Maintenance and Auth
# APIs the project never calls), and the imports nothing left uses. rpc.proto compiled whole is
# ~42 CPU-seconds per build under a sanitizer (its .pb.cc and .grpc.pb.cc, measured 2026-11-27),
# paid by every preset the test command builds; the kept part is a third of it.
# Messages, fields, numbers and the kept services are left byte for byte as etcd wrote them. Fails
# if any gogoproto or google.api reference is left (a newer etcd using another option is then
# noticed at build time instead of as a protoc error about a missing import), or if the file is not
# laid out as this script assumes (every top-level block opens with `message|enum|service Name {`
# at the start of a line and closes with a line that is just `}`).
#   cmake -DIN=<etcd .proto> -DOUT=<copy> [-DKEEP_SERVICES=A,B] -P strip_etcd_proto.cmake
cmake_minimum_required(VERSION 3.25)  # script mode: today's policies (IN_LIST, POP_FRONT)
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

set(note "")
if(KEEP_SERVICES)
  string(REPLACE "," ";" keep_services "${KEEP_SERVICES}")
  # CMake lists are ';'-separated (and a '[' without its ']' or a '\' before a ';' joins elements),
  # and .proto text is full of ';': work on lines with those characters replaced by markers that
  # .proto text does not hold, and put them back at the end.
  if(text MATCHES "<dp_(semi|lb|rb|bs)>")
    message(FATAL_ERROR "strip_etcd_proto.cmake: ${IN} holds this script's markers <dp_...>")
  endif()
  string(REPLACE "\\" "<dp_bs>" text "${text}")
  string(REPLACE ";" "<dp_semi>" text "${text}")
  string(REPLACE "[" "<dp_lb>" text "${text}")
  string(REPLACE "]" "<dp_rb>" text "${text}")
  string(REPLACE "\n" ";" lines "${text}")
  # Split into top-level blocks (block_<name>: its lines) and the text between them (kept as is,
  # in order; `@name` stands for where block <name> goes).
  set(order "")
  set(names "")
  set(current "")
  foreach(line IN LISTS lines)
    if(current STREQUAL "")
      if(line MATCHES "^(message|enum|service) ([A-Za-z0-9_]+)[ \t]*{")
        set(current ${CMAKE_MATCH_2})
        set(kind_${current} ${CMAKE_MATCH_1})
        set(block_${current} "${line}")
        list(APPEND names ${current})
        list(APPEND order "@${current}")
        if(line MATCHES "}[ \t]*$")
          set(current "")  # a one-line block, `message Foo {}`
        endif()
      else()
        list(APPEND order "${line}")
      endif()
    else()
      string(APPEND block_${current} "\n${line}")
      if(line STREQUAL "}")
        set(current "")
      elseif(line MATCHES "^(message|enum|service) ")
        message(FATAL_ERROR "strip_etcd_proto.cmake: ${IN}: '${line}' starts before block "
                            "'${current}' closed with a line '}'; the file's layout changed")
      endif()
    endif()
  endforeach()
  if(NOT current STREQUAL "")
    message(FATAL_ERROR "strip_etcd_proto.cmake: ${IN}: block '${current}' never closes")
  endif()
  foreach(s IN LISTS keep_services)
    if(NOT DEFINED kind_${s} OR NOT kind_${s} STREQUAL "service")
      message(FATAL_ERROR "strip_etcd_proto.cmake: ${IN} has no service '${s}' (KEEP_SERVICES)")
    endif()
  endforeach()
  # Reachability from the kept services: a block is kept when a kept block names it (a field's or
  # an rpc's type; a name that appears only in a comment keeps a block too, which is harmless).
  set(kept ${keep_services})
  set(queue ${keep_services})
  while(queue)
    list(POP_FRONT queue n)
    string(REGEX MATCHALL "[A-Za-z_][A-Za-z0-9_]*" words "${block_${n}}")
    list(REMOVE_DUPLICATES words)
    foreach(w IN LISTS words)
      if(DEFINED kind_${w} AND NOT w IN_LIST kept AND NOT kind_${w} STREQUAL "service")
        list(APPEND kept ${w})
        list(APPEND queue ${w})
      endif()
    endforeach()
  endwhile()
  set(text "")
  set(kept_text "")
  foreach(item IN LISTS order)
    if(item MATCHES "^@(.*)$")
      if(CMAKE_MATCH_1 IN_LIST kept)
        string(APPEND text "${block_${CMAKE_MATCH_1}}\n")
        string(APPEND kept_text "${block_${CMAKE_MATCH_1}}\n")
      endif()
    else()
      string(APPEND text "${item}\n")
    endif()
  endforeach()
  string(REPLACE "<dp_semi>" ";" text "${text}")
  string(REPLACE "<dp_lb>" "[" text "${text}")
  string(REPLACE "<dp_rb>" "]" text "${text}")
  string(REPLACE "<dp_bs>" "\\" text "${text}")
  # An import nothing kept uses (rpc.proto's auth.proto once the Auth API is gone): protoc would
  # warn and the generated code would include its header for nothing.
  string(REGEX MATCHALL "import \"[^\"]+\"" imports "${text}")  # (no ';': list elements)
  foreach(imp IN LISTS imports)
    string(REGEX REPLACE "import \"(.*)\"" "\\1" path "${imp}")
    get_filename_component(dir "${path}" DIRECTORY)
    get_filename_component(pkg "${dir}" NAME)  # etcd names each package after its directory
    if(NOT kept_text MATCHES "[^A-Za-z0-9_]${pkg}\\.")
      string(REPLACE "${imp};\n" "" text "${text}")
    endif()
  endforeach()
  set(note "; only services ${KEEP_SERVICES} and what they use")
  list(LENGTH names n_all)
  list(LENGTH kept n_kept)
  message(STATUS "strip_etcd_proto: ${IN}: kept ${n_kept} of ${n_all} top-level blocks "
                 "(services ${KEEP_SERVICES} and what they use)")
endif()
file(WRITE "${OUT}" "// Generated at build time from ${IN} by src/coord/proto/strip_etcd_proto.cmake\n// (gogoproto and google.api options removed${note}). Do not edit.\n${text}")
