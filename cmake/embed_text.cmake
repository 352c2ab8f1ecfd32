# Turns a text file into a C++ source defining `const char SYMBOL[]` (its bytes, NUL-terminated) and
# `const std::size_t SYMBOL_size` (without the NUL), so a file such as the hub's status page ships inside
# the binary and stays an ordinary file in the tree.
#
# A line `<script src="NAME"></script>` of the file is replaced by the script NAME (beside it) inline,
# so a page's script can be a file of its own and the page still needs nothing from elsewhere; opened
# from the tree, the page loads the same script.
#
#   cmake -DINPUT=page.html -DOUTPUT=page.cpp -DSYMBOL=k_page -P cmake/embed_text.cmake
file(READ "${INPUT}" text)
get_filename_component(dir "${INPUT}" DIRECTORY)
string(REGEX MATCHALL "<script src=\"[^\"]+\"></script>" scripts "${text}")
foreach(tag IN LISTS scripts)
  string(REGEX REPLACE "<script src=\"([^\"]+)\"></script>" "\\1" name "${tag}")
  file(READ "${dir}/${name}" script)
  string(REPLACE "${tag}" "<script>\n${script}</script>" text "${text}")
endforeach()
file(WRITE "${OUTPUT}.txt" "${text}")
file(READ "${OUTPUT}.txt" hex HEX)
file(REMOVE "${OUTPUT}.txt")
string(LENGTH "${hex}" hex_length)
math(EXPR size "${hex_length} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "'\\\\x\\1'," bytes "${hex}")
# Lines of 16 bytes keep the generated file readable in a diff or a debugger.
string(REGEX REPLACE "(('[^']+',){16})" "\\1\n  " bytes "${bytes}")
file(WRITE "${OUTPUT}.tmp" "// Generated from ${INPUT} by cmake/embed_text.cmake; do not edit.\n#include <cstddef>\n\n"
     "extern const char ${SYMBOL}[];\nextern const std::size_t ${SYMBOL}_size;\n"
     "const char ${SYMBOL}[] = {\n  ${bytes}'\\0'};\nconst std::size_t ${SYMBOL}_size = ${size};\n")
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.tmp")
