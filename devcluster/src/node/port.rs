//! Whether a node's port can be bound before its server is started.
//!
//! The fixed ports of `Spec::local` (55432, 33061-33073) lie inside the
//! kernel's ephemeral range, so an outgoing connection may have been
//! handed one as its local port. Closed, such a socket stays in
//! TIME-WAIT for a minute, and since it was not opened with
//! `SO_REUSEADDR` the kernel refuses a server's bind of that port until
//! it expires ("Address already in use", though nothing listens). Right
//! after a test run this happened to `cluster up`. A port held so is
//! waited for; one another server listens on is an error at once.

use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use crate::Error;

/// How long a port held by a closed connection is waited for: TIME-WAIT
/// lasts 60 s on Linux.
const HELD_WAIT: Duration = Duration::from_secs(75);

/// What a port is to a server about to bind it.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum PortState {
    /// It can be bound.
    Free,
    /// Another process listens on it.
    Listening,
    /// It cannot be bound, yet nothing listens: a client socket has it
    /// (open, or closed and in TIME-WAIT).
    Held,
}

/// Probes `port` on 127.0.0.1 with a bind (with `SO_REUSEADDR`, as the
/// servers bind) and, if that fails, a connection.
pub(super) fn probe(port: u16) -> PortState {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    if TcpListener::bind(addr).is_ok() {
        return PortState::Free;
    }
    match TcpStream::connect_timeout(&addr, Duration::from_millis(500)) {
        // A connection whose own port is the target's connected to
        // itself (TCP's simultaneous open): nobody listens.
        Ok(stream) if stream.local_addr().is_ok_and(|a| a == addr) => PortState::Held,
        Ok(_) => PortState::Listening,
        Err(_) => PortState::Held,
    }
}

/// Waits until `node`'s `port` can be bound: at once if it can, up to
/// [`HELD_WAIT`] if a client socket holds it; an error naming the port if
/// another process listens on it or the wait runs out.
pub(super) async fn wait_free(node: &str, port: u16) -> Result<(), Error> {
    let started = Instant::now();
    let mut told = false;
    loop {
        match probe(port) {
            PortState::Free => return Ok(()),
            PortState::Listening => {
                return Err(Error::Server(format!(
                    "{node} cannot start: another process listens on 127.0.0.1:{port} \
                     (not a server of this dev cluster: its pid file names none)"
                )))
            }
            PortState::Held if started.elapsed() >= HELD_WAIT => {
                return Err(Error::Server(format!(
                    "{node} cannot start: port {port} was still held by a client \
                     connection after {HELD_WAIT:?} (see `ss -tanp 'sport = :{port}'`)"
                )))
            }
            PortState::Held => {
                if !told {
                    tracing::warn!(
                        node,
                        port,
                        "the port is held by a closed client connection (TIME-WAIT); \
                         waiting for the kernel to free it, at most {HELD_WAIT:?}"
                    );
                    told = true;
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listened_port_is_listening_and_a_closed_one_free() {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        assert_eq!(probe(port), PortState::Listening);
        drop(listener);
        assert_eq!(probe(port), PortState::Free);
    }

    #[test]
    fn a_port_whose_client_closed_first_is_held_in_time_wait() {
        let server = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let client = TcpStream::connect(server.local_addr().unwrap()).unwrap();
        let port = client.local_addr().unwrap().port();
        let (accepted, _) = server.accept().unwrap();
        // The client closes first: its side waits for the server's FIN
        // (FIN-WAIT), then stays in TIME-WAIT for a minute, its port held
        // throughout.
        drop(client);
        drop(accepted);
        assert_eq!(probe(port), PortState::Held);
    }

    #[test]
    fn a_port_an_open_client_socket_holds_is_held() {
        // A client socket bound without SO_REUSEADDR, connected to a
        // listener: its port cannot be bound by a server, yet nothing
        // listens on it. (That the port is free again once the client
        // closes cannot be asserted: Linux hands the same ephemeral port
        // to connections to other peers, and any of them on the machine
        // may hold it in TIME-WAIT by then. A closed listener's port
        // coming back free is the first test's.)
        let server = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let client = TcpStream::connect(server.local_addr().unwrap()).unwrap();
        let port = client.local_addr().unwrap().port();
        let _accepted = server.accept().unwrap();
        assert_eq!(probe(port), PortState::Held);
    }
}
