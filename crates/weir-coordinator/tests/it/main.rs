//! Integration tests of the coordinator driver over real loopback HTTP and
//! real file-system checkpoint storage.

mod client;
mod http_api;
mod lifecycle;
mod tls;
