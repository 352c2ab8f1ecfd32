# tessera_add_library: one library target per concept, declared in one call (STYLE.md, "Layout").
#
#   tessera_add_library(<name>
#     [SOURCES <file>...]         # its .cpp files, relative to the calling folder; none: header-only
#     [HEADERS <file>...]         # the public headers it owns, by name: include/tessera/<folder>/<file>,
#                                 # <folder> being the calling folder's path in the tree (core/math)
#     [DEPS <target>...]          # public: what its headers include, or its users must link with it
#     [PRIVATE_DEPS <target>...]) # what only its sources use
#
# defines the target tessera_<name> and its alias tessera::<name>, whose users get <folder>/include as
# an include folder, and builds its sources with the warning set of STYLE.md (tessera::warnings). A
# library without SOURCES is an INTERFACE library: headers and DEPS only, e.g. a module's umbrella
# target that links its finer ones.
#
#   tessera_add_library(crypto
#     SOURCES src/common.cpp src/digest.cpp src/seal.cpp src/pki.cpp src/tls.cpp
#     HEADERS digest.hpp error.hpp pki.hpp seal.hpp tls.hpp
#     DEPS tessera::errors
#     PRIVATE_DEPS tessera::files OpenSSL::SSL OpenSSL::Crypto)
#
# HEADERS are recorded as the target's header file set: the list says what the target offers, and
# configuring with -DCMAKE_VERIFY_INTERFACE_HEADER_SETS=ON adds a build target
# (all_verify_interface_header_sets) that compiles each header alone against the target's own
# dependencies, which proves the DEPS are enough for its headers.
function(tessera_add_library name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "SOURCES;HEADERS;DEPS;PRIVATE_DEPS")
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "tessera_add_library(${name}): unknown arguments ${arg_UNPARSED_ARGUMENTS}")
  endif()
  set(target tessera_${name})
  set(include_dir ${CMAKE_CURRENT_SOURCE_DIR}/include)
  # Headers are named by file; they live in include/tessera/<this folder's path>/ (hub, core/math), so
  # an include names the folder that holds the header.
  file(RELATIVE_PATH folder ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR})
  list(TRANSFORM arg_HEADERS PREPEND ${include_dir}/tessera/${folder}/)
  if(arg_SOURCES)
    add_library(${target} ${arg_SOURCES})
    set(scope PUBLIC)
    target_link_libraries(${target} PRIVATE tessera::warnings ${arg_PRIVATE_DEPS})
  else()
    if(arg_PRIVATE_DEPS)
      message(FATAL_ERROR "tessera_add_library(${name}): PRIVATE_DEPS without SOURCES")
    endif()
    add_library(${target} INTERFACE)
    set(scope INTERFACE)
  endif()
  add_library(tessera::${name} ALIAS ${target})
  if(arg_HEADERS)
    target_sources(${target} ${scope} FILE_SET HEADERS BASE_DIRS ${include_dir} FILES ${arg_HEADERS})
  else()
    target_include_directories(${target} ${scope} ${include_dir})
  endif()
  if(arg_DEPS)
    target_link_libraries(${target} ${scope} ${arg_DEPS})
  endif()
endfunction()

# tessera_add_test: one doctest executable (doctest's runner, tessera_test_main in tests/CMakeLists.txt,
# and the given sources) registered with CTest, its files compiled by tessera_test_build.
#
#   tessera_add_test(<name> SOURCES <file>... DEPS <target>...)
function(tessera_add_test name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "SOURCES;DEPS")
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "tessera_add_test(${name}): unknown arguments ${arg_UNPARSED_ARGUMENTS}")
  endif()
  add_executable(${name} ${arg_SOURCES})
  target_link_libraries(${name} PRIVATE tessera_test_main ${arg_DEPS} tessera::warnings)
  tessera_test_build(${name})
  add_test(NAME ${name} COMMAND ${name})
endfunction()

# tessera_test_build(<target>): how a test executable's own files compile. They drive the libraries,
# which keep their build type's flags (so the tests run the code that ships); the tests' files are half
# or more of a build's compile time, and their optimisation buys nothing.
# - Release: -O1. -O3 was a third of each test file's compile time (json_config_test 12.0 s against
#   8.2 s); -O0 compiles no faster than -O1 without the sanitizers (it emits more code).
# - Under the sanitizers: -O0. ASan and UBSan instrument every access alike (none is optimised away),
#   and the test files compile in about half the time: all of them 8 min 49 s at -O1 against 5 min 40 s
#   on 2 cores, back to back on one machine; the sanitizer ctest 86 s (78-84 s before).
# - In unity batches of up to 8 files (TESSERA_UNITY_TESTS): doctest, the standard library,
#   nlohmann/json, Eigen and Asio are parsed once a batch, not once a file. A file whose file-local
#   helpers share a name with another file's is marked SKIP_UNITY_BUILD_INCLUSION where its target is
#   declared, and compiles alone. Each executable runs the same test cases either way.
# Tried and dropped: GCC's precompiled headers per test executable (doctest, the standard library,
# nlohmann/json, Eigen, Asio). They are 100-240 MB, and loading one cost more than parsing the headers:
# error_test 2.0 s with, 1.3 s without.
function(tessera_test_build target)
  set_target_properties(${target} PROPERTIES UNITY_BUILD ${TESSERA_UNITY_TESTS} UNITY_BUILD_BATCH_SIZE 8)
  if(TESSERA_SANITIZE OR TESSERA_TSAN)
    target_compile_options(${target} PRIVATE -O0)
  else()
    target_compile_options(${target} PRIVATE $<$<CONFIG:Release>:-O1>)
  endif()
endfunction()
