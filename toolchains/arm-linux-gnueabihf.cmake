# Cross-build for 32-bit ARM Linux boards (ARMv7-A with hard-float: Raspberry Pi 2/3/4 on a 32-bit OS,
# BeagleBone, i.MX6, Allwinner H3) with Debian's cross compiler and the target's libraries from Debian's
# multiarch archive. toolchains/install-cross armhf installs both; toolchains/cross-test armhf builds and
# tests.
set(tessera_triplet arm-linux-gnueabihf)
set(tessera_processor armv7l)
set(tessera_qemu qemu-arm-static)
# Debian's armhf baseline is ARMv7-A with VFPv3-D16 and no NEON, which leaves Eigen scalar. NEON is
# optional in ARMv7 but present on every board above (Cortex-A7, A8, A9 as shipped, A53/A72 in 32-bit
# mode), so we require it: -mfpu=neon makes GCC define __ARM_NEON and Eigen use its NEON kernels. Plain
# `neon` (VFPv3 + NEON) rather than `neon-vfpv4` keeps Cortex-A8/A9. A core without NEON (Tegra 2) would
# need this line changed. The ABI (hard-float, Thumb-2) is Debian's.
set(tessera_arch_flags "-march=armv7-a+fp -mfpu=neon -mfloat-abi=hard")
include(${CMAKE_CURRENT_LIST_DIR}/debian-multiarch.cmake)
