//! The harness proper: worker processes, the Redis handle, the wait.

pub(crate) mod redis;
pub mod wait;
pub(crate) mod worker;
