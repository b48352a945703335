//! Ctrl-C and SIGTERM to oomgate: counted, never acted on inside the
//! handler.
//!
//! The handler only bumps a counter; the runner polls it every tick. On the
//! first signal the running case is stopped the normal way (SIGTERM to its
//! groups, a grace period, SIGKILL), results gathered so far are written and
//! oomgate exits 130. A second signal skips the grace period. Workloads run
//! in their own process groups, so a terminal's Ctrl-C reaches oomgate only
//! and oomgate decides how they stop.
//!
//! A stop signal oomgate was started with ignored stays ignored, as a
//! shell leaves one (POSIX: a signal ignored on entry to a non-interactive
//! shell cannot be trapped): `nohup oomgate run …` is not ended by a
//! hangup, a shell's background job not by the terminal's Ctrl-C, and the
//! workloads inherit the signal ignored, as they would have without
//! oomgate.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// How many stop signals oomgate received.
#[derive(Debug, Clone, Default)]
pub struct Interrupt {
    count: Arc<AtomicUsize>,
}

impl Interrupt {
    /// A counter fed by SIGINT, SIGTERM and SIGHUP, each but one oomgate
    /// was started with ignored.
    pub fn install() -> io::Result<Self> {
        let interrupt = Interrupt::default();
        for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            if ignored(signal)? {
                continue;
            }
            let count = Arc::clone(&interrupt.count);
            // SAFETY: the handler only does an atomic add and an atomic
            // store, which are async-signal-safe; it allocates nothing and
            // takes no lock.
            unsafe {
                signal_hook::low_level::register(signal, move || {
                    count.fetch_add(1, Ordering::SeqCst);
                    // A report blocked on a FIFO must not outlast a stop.
                    crate::files::stop_waiting();
                })?;
            }
        }
        Ok(interrupt)
    }

    pub fn requested(&self) -> bool {
        self.count.load(Ordering::SeqCst) > 0
    }

    /// A second signal: stop without waiting for the grace period.
    pub fn insisted(&self) -> bool {
        self.count.load(Ordering::SeqCst) > 1
    }

    /// A stop asked from within oomgate (a bisect stopping the runs it
    /// started, after an error), counted as a signal is.
    pub fn request(&self) {
        self.count.fetch_add(1, Ordering::SeqCst);
    }
}

/// Whether `signal` is ignored now.
fn ignored(signal: i32) -> io::Result<bool> {
    // SAFETY: sigaction with no new action writes the current one to the
    // zeroed local passed.
    let mut current: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: as above; a null new action changes nothing.
    if unsafe { libc::sigaction(signal, std::ptr::null(), &mut current) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(current.sa_sigaction == libc::SIG_IGN)
}
