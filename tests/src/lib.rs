//! Integration-test support crate (tests live in tests/).
