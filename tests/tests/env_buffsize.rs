//! HCCL_BUFFSIZE read from the real process environment (its own test
//! binary, so setting the variable cannot race with other tests).

use hccl_adapter::{HcclComm, HcclResult};

#[test]
fn garbage_and_zero_buffsize_from_the_environment() {
    for v in ["0", "12MB"] {
        std::env::set_var("HCCL_BUFFSIZE", v);
        let e = HcclComm::init_all(2).unwrap_err();
        assert_eq!(e.code(), HcclResult::EPara);
        assert!(
            e.to_string().contains(&format!("HCCL_BUFFSIZE='{v}'")),
            "{e}"
        );
    }
    std::env::set_var("HCCL_BUFFSIZE", "2");
    let comms = HcclComm::init_all(2).unwrap();
    assert_eq!(comms[0].communicator().config().buffer_size, 2 << 20);
    std::env::remove_var("HCCL_BUFFSIZE");
}
