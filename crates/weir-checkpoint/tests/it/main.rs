//! Integration tests of weir-checkpoint against real stores: the local file
//! system, an in-process store, and S3 through a moto server on loopback.

mod common;
mod crash;
mod lease;
mod retention;
mod s3;
mod savepoint;
mod storage;
mod timeline;
