#!/usr/bin/env bash
# Installs libhccl (shared and static), the HCCL and ACL headers and a
# pkg-config file under PREFIX (default /usr/local):
#
#   PREFIX/include/hccl/{hccl.h,hccl_types.h,hccl_comm.h,hccl_ex.h,hccl_sym_win.h}
#   PREFIX/include/acl/{acl.h,acl_base.h,acl_rt.h,acl_prof.h}
#   PREFIX/lib/libhccl.so, libhccl.a
#   PREFIX/lib/libascendcl.so, libacl_rt.so, libmsprofiler.so -> libhccl.so
#     (one library, one state)
#   PREFIX/lib/pkgconfig/hccl.pc
#
# Usage: bash tools/install.sh [PREFIX]
set -euo pipefail
PREFIX=$(realpath -m "${1:-${PREFIX:-/usr/local}}")
cd "$(dirname "$0")/.."

cargo build --release -p hccl-ffi
target=${CARGO_TARGET_DIR:-target}/release

install -d "$PREFIX/include/hccl" "$PREFIX/include/acl" "$PREFIX/lib/pkgconfig"
install -m 644 include/hccl/*.h "$PREFIX/include/hccl/"
install -m 644 include/acl/*.h "$PREFIX/include/acl/"
install -m 755 "$target/libhccl.so" "$PREFIX/lib/libhccl.so"
install -m 644 "$target/libhccl.a" "$PREFIX/lib/libhccl.a"
# Programs written for HCCL link -lascendcl (and some -lacl_rt; profiling
# ones -lmsprofiler, where Ascend ships aclprof*): the ACL shim lives in
# libhccl, and symlinks keep a single loaded copy.
ln -sf libhccl.so "$PREFIX/lib/libascendcl.so"
ln -sf libhccl.so "$PREFIX/lib/libacl_rt.so"
ln -sf libhccl.so "$PREFIX/lib/libmsprofiler.so"

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
cat > "$PREFIX/lib/pkgconfig/hccl.pc" <<PC
prefix=$PREFIX
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: hccl
Description: hccl-rs: HCCL-compatible collective communication on CPUs (with the ACL runtime shim)
Version: $version
Cflags: -I\${includedir}
Libs: -L\${libdir} -Wl,-rpath,\${libdir} -lhccl
Libs.private: -lgcc_s -lutil -lrt -lpthread -lm -ldl
PC
echo "installed hccl-rs $version under $PREFIX (pkg-config: PKG_CONFIG_PATH=$PREFIX/lib/pkgconfig)"
