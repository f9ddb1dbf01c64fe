//! hccl-test: collective performance test with hccl_test's flags and output.
//!
//! ```text
//! hccl-test all_reduce -p 4 -b 8 -e 64M -f 2 -n 20 -w 5 -o sum -d fp32 -c 1
//! ```
//! Ranks are threads of this process (one communicator per rank).

#![forbid(unsafe_code)]

fn main() {
    hccl_tools::hccl_test_main()
}
