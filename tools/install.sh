#!/usr/bin/env bash
# Installs libhccl (shared and static), the HCCL and ACL headers and a
# pkg-config file under PREFIX (default /usr/local). The libraries go to
# PREFIX/lib64, where HCCL programs' Makefiles look (${ASCEND_HOME}/lib64);
# PREFIX/lib holds symlinks to them, so -L PREFIX/lib keeps working:
#
#   PREFIX/include/hccl/{hccl.h,hccl_types.h,hccl_comm.h,hccl_ex.h,hccl_sym_win.h}
#   PREFIX/include/acl/{acl.h,acl_base.h,acl_rt.h,acl_prof.h}
#   PREFIX/lib64/libhccl.so, libhccl.a
#   PREFIX/lib64/libhcomm.so, libascendcl.so, libacl_rt.so, libmsprofiler.so -> libhccl.so
#     (one library, one state: HCCL ships the communicator calls in libhcomm,
#     ACL in libascendcl / libacl_rt, aclprof* in libmsprofiler)
#   PREFIX/lib64/pkgconfig/hccl.pc
#   PREFIX/lib/<each of the above> -> ../lib64/<it>, PREFIX/lib/pkgconfig/hccl.pc
#
# Usage: bash tools/install.sh [PREFIX]
set -euo pipefail
PREFIX=$(realpath -m "${1:-${PREFIX:-/usr/local}}")
cd "$(dirname "$0")/.."

cargo build --release -p hccl-ffi
target=${CARGO_TARGET_DIR:-target}/release

install -d "$PREFIX/include/hccl" "$PREFIX/include/acl" \
  "$PREFIX/lib64/pkgconfig" "$PREFIX/lib/pkgconfig"
install -m 644 include/hccl/*.h "$PREFIX/include/hccl/"
install -m 644 include/acl/*.h "$PREFIX/include/acl/"
install -m 755 "$target/libhccl.so" "$PREFIX/lib64/libhccl.so"
install -m 644 "$target/libhccl.a" "$PREFIX/lib64/libhccl.a"
# Programs written for HCCL link -lhccl -lhcomm -lascendcl (some -lacl_rt;
# profiling ones -lmsprofiler) and PyTorch's NPU adapter opens libhcomm.so:
# all of it lives in libhccl, and symlinks keep a single loaded copy.
aliases=(libhcomm.so libascendcl.so libacl_rt.so libmsprofiler.so)
for a in "${aliases[@]}"; do
  ln -sfn libhccl.so "$PREFIX/lib64/$a"
done
# PREFIX/lib: the same names, pointing into lib64 (an earlier install put
# regular files here; ln -f replaces them). Skipped where lib and lib64 are
# one directory (one a symlink to the other): the files are there already.
if [ "$(realpath "$PREFIX/lib")" != "$(realpath "$PREFIX/lib64")" ]; then
  for f in libhccl.so libhccl.a "${aliases[@]}"; do
    ln -sfn "../lib64/$f" "$PREFIX/lib/$f"
  done
fi

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
# one pkg-config file for both directories: libdir is lib64, where the
# files are (the rpath too, so programs find them wherever they link from)
for pcdir in lib64 lib; do
  cat > "$PREFIX/$pcdir/pkgconfig/hccl.pc" <<PC
prefix=$PREFIX
libdir=\${prefix}/lib64
includedir=\${prefix}/include

Name: hccl
Description: hccl-rs: HCCL-compatible collective communication on CPUs (with the ACL runtime shim)
Version: $version
Cflags: -I\${includedir}
Libs: -L\${libdir} -Wl,-rpath,\${libdir} -lhccl
Libs.private: -lgcc_s -lutil -lrt -lpthread -lm -ldl
PC
done
echo "installed hccl-rs $version under $PREFIX (libraries in lib64, symlinked from lib; pkg-config: PKG_CONFIG_PATH=$PREFIX/lib64/pkgconfig or $PREFIX/lib/pkgconfig)"
