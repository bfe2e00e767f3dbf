# Protobuf + gRPC code generation for the project's services (Debian protobuf-compiler-grpc).
find_package(Protobuf REQUIRED)
find_package(gRPC CONFIG REQUIRED)
find_program(DUALPATH_GRPC_CPP_PLUGIN grpc_cpp_plugin REQUIRED)

set(DUALPATH_PROTO_OUT ${CMAKE_BINARY_DIR}/generated)
file(MAKE_DIRECTORY ${DUALPATH_PROTO_OUT})

# dualpath_proto_sources(OUT_VAR PROTO_ROOT files relative to PROTO_ROOT... [IMPORT_DIRS dirs...]):
# runs protoc and grpc_cpp_plugin; generated files go to ${CMAKE_BINARY_DIR}/generated/<same
# relative path>. Imports resolve against PROTO_ROOT, the control plane's proto root and any
# IMPORT_DIRS (the fuzz protos import both services' messages).
function(dualpath_proto_sources out_var proto_root)
  cmake_parse_arguments(ARG "" "" "IMPORT_DIRS" ${ARGN})
  set(import_args "")
  foreach(dir IN LISTS ARG_IMPORT_DIRS)
    list(APPEND import_args --proto_path=${dir})
  endforeach()
  set(srcs "")
  foreach(rel IN LISTS ARG_UNPARSED_ARGUMENTS)
    get_filename_component(stem ${rel} NAME_WE)
    get_filename_component(dir ${rel} DIRECTORY)
    set(base ${DUALPATH_PROTO_OUT}/${dir}/${stem})
    add_custom_command(
      OUTPUT ${base}.pb.cc ${base}.pb.h ${base}.grpc.pb.cc ${base}.grpc.pb.h
      COMMAND protobuf::protoc ARGS --proto_path=${proto_root}
              --proto_path=${PROJECT_SOURCE_DIR}/src/control/proto ${import_args}
              --cpp_out=${DUALPATH_PROTO_OUT} --grpc_out=${DUALPATH_PROTO_OUT}
              --plugin=protoc-gen-grpc=${DUALPATH_GRPC_CPP_PLUGIN} ${proto_root}/${rel}
      DEPENDS ${proto_root}/${rel}
      COMMENT "protoc ${rel}")
    list(APPEND srcs ${base}.pb.cc ${base}.grpc.pb.cc)
  endforeach()
  set(${out_var} ${srcs} PARENT_SCOPE)
endfunction()

