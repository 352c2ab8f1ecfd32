# Cross-build for 64-bit ARM Linux boards (Raspberry Pi 3/4/5 and Zero 2 on a 64-bit OS, Jetson, most
# current SBCs) with Debian's cross compiler and the target's libraries from Debian's multiarch archive.
# toolchains/install-cross aarch64 installs both; toolchains/cross-test aarch64 builds and tests.
#
# The host's root is the sysroot: Debian puts the target's libraries in /usr/lib/aarch64-linux-gnu and its
# arch-specific headers in /usr/include/aarch64-linux-gnu, both next to the host's, and the cross compiler
# already searches those plus /usr/include. Header-only dependencies (Eigen, nlohmann/json, doctest, Boost)
# are therefore the host's, found through their arch-independent CMake files under /usr/share and /usr/lib.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
# find_library and find_package look in /usr/lib/aarch64-linux-gnu, never in the host's multiarch folder.
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

# FindOpenSSL takes its hints from pkg-config, and those hints win over the search path: with the host's
# .pc files it silently picks the host's libssl and the link fails (or worse, a test binary mixes both).
# LIBDIR, not PATH: it replaces pkg-config's default (host) folders instead of adding to them.
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")

# Architecture flags live here and only here. ARMv8-A is the baseline every 64-bit ARM board implements;
# Advanced SIMD (NEON) is mandatory in it, so Eigen vectorises with NEON without further flags. No -mcpu
# for one board: the binary runs on all of them, as the x86-64-v3 level does on x86.
set(CMAKE_C_FLAGS_INIT "-march=armv8-a")
set(CMAKE_CXX_FLAGS_INIT "-march=armv8-a")

# CTest and add_test run target binaries through user-mode qemu. `-L /` (the host's root) and not
# `-L /usr/aarch64-linux-gnu`: once the multiarch packages are installed, the target's ld.so and libc live
# under /lib and /usr/lib/aarch64-linux-gnu, and the cross toolchain's copy under /usr/aarch64-linux-gnu
# makes binaries hang in thread start-up (qemu-user 7.2 of Debian 12).
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64-static -L /)
