# Cross-build for 32-bit ARM Linux boards (ARMv7-A with hard-float: Raspberry Pi 2/3/4 on a 32-bit OS,
# BeagleBone, i.MX6, Allwinner H3) with Debian's cross compiler and the target's libraries from Debian's
# multiarch archive. toolchains/install-cross armhf installs both; toolchains/cross-test armhf builds and
# tests. The layout is the one described in aarch64-linux-gnu.cmake.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR armv7l)
set(CMAKE_C_COMPILER arm-linux-gnueabihf-gcc)
set(CMAKE_CXX_COMPILER arm-linux-gnueabihf-g++)
set(CMAKE_LIBRARY_ARCHITECTURE arm-linux-gnueabihf)

# Keeps FindOpenSSL off the host's libssl (see aarch64-linux-gnu.cmake).
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/arm-linux-gnueabihf/pkgconfig:/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")

# Architecture flags live here and only here. Debian's armhf baseline is ARMv7-A with VFPv3-D16 and no
# NEON, which leaves Eigen scalar. NEON is optional in ARMv7 but present on every board above (Cortex-A7,
# A8, A9 as shipped, A53/A72 in 32-bit mode), so we require it: -mfpu=neon makes GCC define __ARM_NEON and
# Eigen use its NEON kernels. Plain `neon` (VFPv3 + NEON) rather than `neon-vfpv4` keeps Cortex-A8/A9.
# A core without NEON (Tegra 2) would need this line removed. The ABI (hard-float, Thumb-2) is Debian's.
set(CMAKE_C_FLAGS_INIT "-march=armv7-a+fp -mfpu=neon -mfloat-abi=hard")
set(CMAKE_CXX_FLAGS_INIT "-march=armv7-a+fp -mfpu=neon -mfloat-abi=hard")

# CTest and add_test run target binaries through user-mode qemu, with `-L /` for the reason given in
# aarch64-linux-gnu.cmake.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-arm-static -L /)
