# The part every ARM toolchain file here shares: Debian's cross compiler for `tessera_triplet`, the
# target's libraries from Debian's multiarch archive, and user-mode qemu to run what is built. A
# toolchain file sets tessera_triplet, tessera_processor, tessera_arch_flags and tessera_qemu, then
# includes this file.
#
# The host's root is the sysroot: Debian puts the target's libraries in /usr/lib/<triplet> and its
# arch-specific headers in /usr/include/<triplet>, both next to the host's, and the cross compiler already
# searches those plus /usr/include. Header-only dependencies (Eigen, nlohmann/json, doctest, Boost) are
# therefore the host's, found through their arch-independent CMake files under /usr/share and /usr/lib.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR ${tessera_processor})
set(CMAKE_C_COMPILER ${tessera_triplet}-gcc)
set(CMAKE_CXX_COMPILER ${tessera_triplet}-g++)
# find_library and find_package look in /usr/lib/<triplet>, never in the host's multiarch folder.
set(CMAKE_LIBRARY_ARCHITECTURE ${tessera_triplet})

# FindOpenSSL takes its hints from pkg-config, and those hints win over the search path: with the host's
# .pc files it silently picks the host's libssl and the link fails (or worse, a test binary mixes both).
# LIBDIR, not PATH: it replaces pkg-config's default (host) folders instead of adding to them.
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/${tessera_triplet}/pkgconfig:/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")

# Architecture flags live in the toolchain file and only there.
set(CMAKE_C_FLAGS_INIT "${tessera_arch_flags}")
set(CMAKE_CXX_FLAGS_INIT "${tessera_arch_flags}")

# CTest and add_test run target binaries through user-mode qemu. `-L /` (the host's root) and not
# `-L /usr/<triplet>`: once the multiarch packages are installed, the target's ld.so and libc live under
# /lib and /usr/lib/<triplet>, and the cross toolchain's copy under /usr/<triplet> makes binaries hang in
# thread start-up (qemu-user 7.2 of Debian 12).
set(CMAKE_CROSSCOMPILING_EMULATOR ${tessera_qemu} -L /)
