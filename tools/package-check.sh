#!/usr/bin/env bash
# Every workspace crate packages as a registry would hold it, and every
# package compiles from its packaged files alone.
#
# 1. `cargo package --workspace --no-verify`: one .crate per workspace
#    crate. The layers depend on each other by version; cargo resolves
#    each against the packages made before it, in a temporary local
#    registry, as crates.io would once they are published. A file a crate
#    needs but its `include` leaves out, or a path outside the package,
#    fails here or in step 2.
# 2. Instead of cargo's own verification, which builds every package in
#    the dev profile from scratch (4 min 16 s for the eight on the 2-core
#    CI machine, more than CI's budget allows), the .crate files are
#    unpacked into one workspace of their own, whose [patch.crates-io]
#    points each layer at its unpacked package, and checked with
#    `cargo check --all-targets` (libraries, binaries, tests, benches:
#    more targets than the verification builds). It uses the repository's
#    lock file and target directory, so the third-party crates that
#    `cargo clippy --workspace --all-targets` already checked are reused
#    and only the eight packages compile.
#
#   bash tools/package-check.sh
#
# `cargo publish --dry-run --workspace` runs step 1 for the crates that
# may be published (hccl-tests is `publish = false`) and then verifies
# them as step 2 describes. The working tree may hold uncommitted changes
# (--allow-dirty): this checks the manifests and files, not git.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
target=$(realpath -m "${CARGO_TARGET_DIR:-target}")

cargo package --workspace --no-verify --allow-dirty

# name-version of every workspace crate, as its .crate file is named, and
# whether other crates may depend on it from a registry (not publish = false)
crates=$(cargo metadata --no-deps --format-version 1 --offline |
  python3 -c 'import json, sys
for p in json.load(sys.stdin)["packages"]:
    print(p["name"] + "-" + p["version"] + ("" if p["publish"] == [] else ":dep"))')

ws="$target/package-check"
rm -rf "$ws"
mkdir -p "$ws"
members=()
patch=()
names=()
for entry in $crates; do
  c=${entry%:dep}
  names+=("$c")
  tar -xzf "$target/package/$c.crate" -C "$ws"
  members+=("\"$c\"")
  if [ "$entry" != "$c" ]; then
    patch+=("${c%-*} = { path = \"$c\" }")
  fi
done
{
  echo '# unpacked packages of the hccl-rs workspace (tools/package-check.sh)'
  echo '[workspace]'
  echo 'resolver = "2"'
  echo "members = [$(IFS=,; echo "${members[*]}")]"
  echo '[patch.crates-io]'
  printf '%s\n' "${patch[@]}"
} >"$ws/Cargo.toml"
cp "$repo/Cargo.lock" "$ws/Cargo.lock"
# --locked: the packages must build with exactly the repository's
# dependency versions (a version requirement that no longer matches the
# lock fails here)
(cd "$ws" && CARGO_TARGET_DIR="$target" cargo check --workspace --all-targets --locked)
echo "packaged and checked: ${names[*]}"
