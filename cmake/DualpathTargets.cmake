# Helpers so every project target gets the same warnings and sanitizer flags, and third-party
# targets get none of them.

set(DUALPATH_WARNINGS -Wall -Wextra -Werror -Wno-missing-field-initializers)
if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  list(APPEND DUALPATH_WARNINGS -Wthread-safety)
endif()

# DUALPATH_FUZZ (the `debug` preset, clang only) adds libFuzzer's coverage instrumentation
# (fuzzer-no-link) to every project file, so the fuzz targets (fuzz/, linked with libFuzzer's main)
# are built from the same objects as the tests instead of in a second tree that compiled every
# library again (issue 26: that tree was a sixth of a cold test run's compiling). In the tests and
# the `dualpath` binary the instrumentation's callbacks are the sanitizer runtime's no-op defaults.
set(DUALPATH_SAN_LIST "${DUALPATH_SANITIZE}")
if(DUALPATH_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "DUALPATH_FUZZ needs clang (the `debug` preset sets it)")
  endif()
  if(NOT DUALPATH_SANITIZE STREQUAL "address,undefined")
    message(FATAL_ERROR "DUALPATH_FUZZ needs DUALPATH_SANITIZE=address,undefined (the `debug` preset)")
  endif()
  string(APPEND DUALPATH_SAN_LIST ",fuzzer-no-link")
endif()
set(DUALPATH_SAN_FLAGS "")
if(DUALPATH_SANITIZE STREQUAL "address,undefined")
  set(DUALPATH_SAN_FLAGS -fsanitize=${DUALPATH_SAN_LIST} -fno-omit-frame-pointer
                         -fno-sanitize-recover=undefined)
elseif(DUALPATH_SANITIZE STREQUAL "thread")
  set(DUALPATH_SAN_FLAGS -fsanitize=thread -fno-omit-frame-pointer)
elseif(DUALPATH_SANITIZE)
  message(FATAL_ERROR "DUALPATH_SANITIZE='${DUALPATH_SANITIZE}': expected address,undefined, thread or empty")
endif()
if(DUALPATH_SAN_FLAGS)
  add_compile_options(${DUALPATH_SAN_FLAGS})
  add_link_options(${DUALPATH_SAN_FLAGS})
endif()

# dualpath_library(NAME SOURCES ... [PUBLIC_DEPS ...] [PRIVATE_DEPS ...])
# Declares library target dualpath_<NAME> with public headers under include/.
function(dualpath_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;PUBLIC_DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(dualpath_${name} STATIC ${ARG_SOURCES})
  target_include_directories(dualpath_${name} PUBLIC ${PROJECT_SOURCE_DIR}/include
                                              PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_compile_options(dualpath_${name} PRIVATE ${DUALPATH_WARNINGS})
  target_link_libraries(dualpath_${name} PUBLIC ${ARG_PUBLIC_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
endfunction()

# dualpath_test(NAME SOURCES ... DEPS ... [LABELS ...])
# A GoogleTest binary registered with CTest. LABELS tsan marks tests that the tsan preset runs.
function(dualpath_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SOURCES;DEPS;LABELS" ${ARGN})
  if(NOT DUALPATH_BUILD_TESTS)
    return()
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_compile_options(${name} PRIVATE ${DUALPATH_WARNINGS})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gmock GTest::gtest_main)
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  # One CTest entry per test binary (not per test case): gtest_discover_tests flattens list-valued
  # properties such as LABELS and ENVIRONMENT, and a binary per component keeps CTest's parallel
  # scheduling coarse enough for a 2-core machine.
  add_test(NAME ${name} COMMAND ${name} --gtest_color=no)
  set_tests_properties(${name} PROPERTIES
    LABELS "unit;${ARG_LABELS}"
    TIMEOUT ${ARG_TIMEOUT}
    ENVIRONMENT "DUALPATH_SOURCE_DIR=${PROJECT_SOURCE_DIR};DUALPATH_BINARY_DIR=${PROJECT_BINARY_DIR}")
endfunction()

# dualpath_bench(NAME SOURCES ... DEPS ...): a Google Benchmark binary (not run by CTest).
function(dualpath_bench name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  if(NOT DUALPATH_BUILD_BENCH)
    return()
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_compile_options(${name} PRIVATE ${DUALPATH_WARNINGS})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} benchmark::benchmark)
endfunction()
