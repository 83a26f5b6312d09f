# tools/aarch64-linux-gnu.cmake — cross-compile clef for 64-bit ARM Linux
# with Debian's gcc-aarch64-linux-gnu and the arm64 -dev packages
# (dpkg --add-architecture arm64; apt-get install libjansson-dev:arm64 ...):
#   cmake -S . -B build-arm64 -DCMAKE_TOOLCHAIN_FILE=tools/aarch64-linux-gnu.cmake
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
# ctest runs the tests under qemu-user (Debian's qemu-user; -L / takes the
# arm64 libc that the :arm64 packages install: the older one under
# /usr/aarch64-linux-gnu hangs qemu in pthread_create)
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L /)
