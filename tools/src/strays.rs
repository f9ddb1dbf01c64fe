//! Stray connections (`hccl-test --strays N`): while a sweep runs, N silent
//! and N trickling connections stay open to every rank's TCP listener, as a
//! port scanner, a health checker or a misdirected client would keep them,
//! after one that sends garbage at once (which the listener drops and logs).
//! A listener that read introductions synchronously would stall on them;
//! the figures with and without show what they cost real traffic.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How often each trickling connection sends one byte, and how often
/// connections the listener dropped are opened again.
const TICK: Duration = Duration::from_millis(100);

/// The stray connections; closed when dropped.
pub(crate) struct Strays {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<usize>>,
}

struct Stray {
    to: SocketAddr,
    trickle: bool,
    sock: Option<TcpStream>,
}

impl Stray {
    fn open(&mut self) {
        self.sock = TcpStream::connect_timeout(&self.to, Duration::from_secs(1))
            .ok()
            .filter(|s| s.set_nonblocking(true).is_ok());
    }

    /// One tick: a byte for a trickler; a dropped connection opened again.
    /// Returns whether it had to reopen.
    fn tick(&mut self) -> bool {
        let alive = match &mut self.sock {
            None => false,
            Some(s) => {
                let mut b = [0u8; 64];
                let read_ok = match s.read(&mut b) {
                    Ok(0) => false,
                    Ok(_) => true,
                    Err(e) => e.kind() == std::io::ErrorKind::WouldBlock,
                };
                read_ok && (!self.trickle || s.write(b"G").is_ok())
            }
        };
        if !alive {
            self.open();
        }
        !alive
    }
}

impl Strays {
    /// Opens `n` silent and `n` trickling connections to each of
    /// `listeners` and keeps them open (reopening those dropped) until
    /// the returned value is dropped.
    pub(crate) fn start(n: usize, listeners: &[SocketAddr]) -> Strays {
        let mut all: Vec<Stray> = listeners
            .iter()
            .flat_map(|&to| {
                (0..2 * n).map(move |i| Stray {
                    to,
                    trickle: i % 2 == 1,
                    sock: None,
                })
            })
            .collect();
        for s in &mut all {
            s.open();
        }
        for &to in listeners {
            // one that says something wrong at once (a listener logs it)
            if let Ok(mut s) = TcpStream::connect_timeout(&to, Duration::from_secs(1)) {
                let _ = s.write_all(b"GET / HTTP/1.0\r\nHost: hccl-strays\r\n\r\n");
            }
        }
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let thread = std::thread::Builder::new()
            .name("hccl-strays".into())
            .spawn(move || {
                let mut reopened = 0;
                while !stop2.load(Ordering::Relaxed) {
                    std::thread::sleep(TICK);
                    for s in all.iter_mut() {
                        reopened += usize::from(s.tick());
                    }
                }
                reopened
            })
            .ok();
        Strays { stop, thread }
    }
}

impl Drop for Strays {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            if let Ok(n) = t.join() {
                tracing::info!(reopened = n, "stray connections closed");
            }
        }
    }
}
