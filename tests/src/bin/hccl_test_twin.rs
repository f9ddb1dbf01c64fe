//! hccl-test built again under a name of its own (see Cargo.toml): the same
//! program, `hccl_tools::hccl_test_main`, as tools/src/bin/hccl_test.rs.

#![forbid(unsafe_code)]

fn main() {
    hccl_tools::hccl_test_main()
}
