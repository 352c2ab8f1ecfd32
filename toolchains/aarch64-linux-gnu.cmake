# Cross-build for 64-bit ARM Linux boards (Raspberry Pi 3/4/5 and Zero 2 on a 64-bit OS, Jetson, most
# current SBCs) with Debian's cross compiler and the target's libraries from Debian's multiarch archive.
# toolchains/install-cross aarch64 installs both; toolchains/cross-test aarch64 builds and tests.
set(tessera_triplet aarch64-linux-gnu)
set(tessera_processor aarch64)
set(tessera_qemu qemu-aarch64-static)
# ARMv8-A is the baseline every 64-bit ARM board implements; Advanced SIMD (NEON) is mandatory in it, so
# Eigen vectorises with NEON without further flags. No -mcpu for one board: the binary runs on all of
# them, as the x86-64-v3 level does on x86.
set(tessera_arch_flags "-march=armv8-a")
include(${CMAKE_CURRENT_LIST_DIR}/debian-multiarch.cmake)
