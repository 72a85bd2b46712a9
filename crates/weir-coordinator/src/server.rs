//! The HTTP/1 listener: a cap on connections served at once and a deadline
//! for each request head (and a TLS handshake), so idle or slow peers cannot
//! hold the server. With TLS, the routes (`http`) see the decrypted stream.

use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use crate::driver::Shared;
use crate::http;

/// How one server takes connections.
#[derive(Clone)]
pub(crate) struct ConnectionLimits {
    pub(crate) max_connections: usize,
    pub(crate) header_read_timeout: Duration,
    /// HTTPS when set: the handshake must finish within the header timeout.
    pub(crate) tls: Option<TlsAcceptor>,
}

/// Accepts connections until `stop`. Beyond `max_connections` at once, a
/// new connection is closed unanswered (hosts retry a failed connection).
pub(crate) async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    limits: ConnectionLimits,
    stop: CancellationToken,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    loop {
        let stream = tokio::select! {
            () = stop.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                // A failed accept (e.g. a reset connection) concerns that
                // client only.
                Err(_) => continue,
            },
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            drop(stream);
            continue;
        };
        let (shared, stop, tls) = (Arc::clone(&shared), stop.clone(), limits.tls.clone());
        let timeout = limits.header_read_timeout;
        tokio::spawn(async move {
            match tls {
                None => serve_connection(stream, shared, timeout, stop).await,
                Some(acceptor) => {
                    // A failed or slow handshake concerns that client only.
                    if let Ok(Ok(secured)) =
                        tokio::time::timeout(timeout, acceptor.accept(stream)).await
                    {
                        serve_connection(secured, shared, timeout, stop).await;
                    }
                }
            }
            drop(slot);
        });
    }
}

async fn serve_connection<S>(
    stream: S,
    shared: Arc<Shared>,
    header_timeout: Duration,
    stop: CancellationToken,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |request| {
        let shared = Arc::clone(&shared);
        async move { Ok::<_, std::convert::Infallible>(http::handle(&shared, request).await) }
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout);
    let connection = builder.serve_connection(TokioIo::new(stream), service);
    tokio::select! {
        () = stop.cancelled() => {}
        // A broken connection concerns that client only.
        _ = connection => {}
    }
}
