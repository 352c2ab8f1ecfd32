# Native x86-64 builds for the x86-64-v3 level: AVX2, FMA and BMI2 (Intel since Haswell, 2013; AMD
# since Excavator/Zen). Eigen's matrix kernels run about 4x faster than with the baseline x86-64 (SSE2)
# that compilers target by default (bench/README.md). This is a fixed level, not the build host's
# -march=native, so binaries run on any such CPU. For older CPUs use the `portable` preset.
set(CMAKE_CXX_FLAGS_INIT "-march=x86-64-v3")
