//! Integration tests: the real gateway, real sockets, a real upstream.

mod support;

mod limits;
mod proxy;
