//! [`BlackHole`]: a fake server that accepts TCP connections and never
//! answers. It stands in for a memory server that hangs (a stuck OpenViking,
//! a PowerContext behind a dead proxy): every request to it waits until the
//! caller's own deadline. It counts the connections it accepted, so a test
//! can also show that a gated-off surface never reached the backend.

use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// A loopback listener that accepts and holds connections without replying.
pub struct BlackHole {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl BlackHole {
    /// Starts listening on an ephemeral loopback port.
    pub fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        listener
            .set_nonblocking(true)
            .expect("non-blocking listener");
        let addr = listener.local_addr().expect("listener address");
        let accepted = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let held: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let thread = {
            let (accepted, stop) = (Arc::clone(&accepted), Arc::clone(&stop));
            std::thread::spawn(move || {
                while !stop.load(Ordering::Acquire) {
                    match listener.accept() {
                        Ok((stream, _)) => {
                            accepted.fetch_add(1, Ordering::AcqRel);
                            // Read what is sent (so the client's writes
                            // succeed), never write back.
                            let _ = stream.set_read_timeout(Some(Duration::from_millis(10)));
                            held.lock().unwrap().push(stream);
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(5)),
                    }
                    let mut buf = [0u8; 4096];
                    for s in held.lock().unwrap().iter_mut() {
                        let _ = s.read(&mut buf);
                    }
                }
            })
        };
        Self {
            addr,
            accepted,
            stop,
            thread: Some(thread),
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.accepted.load(Ordering::Acquire)
    }
}

impl Drop for BlackHole {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn accepts_counts_and_never_answers() {
        let hole = BlackHole::start();
        let mut client = TcpStream::connect(hole.addr()).unwrap();
        client
            .write_all(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
            .unwrap();
        client
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut buf = [0u8; 16];
        let err = client.read(&mut buf).unwrap_err();
        assert!(matches!(
            err.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ));
        for _ in 0..100 {
            if hole.connections() == 1 {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(hole.connections(), 1);
    }
}
