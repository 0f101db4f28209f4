//! Thread priorities: the polling loops come first.
//!
//! A poll that starts late is a sample taken at the wrong time, while a record that waits a
//! few milliseconds for the HTTP server or the disk writer loses nothing. So the pollers'
//! thread asks for a higher priority ([`POLLERS_NICE`], which needs `CAP_SYS_NICE`: root, or
//! `AmbientCapabilities=CAP_SYS_NICE` in the unit) and every other busy thread of the process
//! (the main runtime's workers, the store writers, the uplink and database threads) moves to a
//! lower one ([`BACKGROUND_NICE`]), which any user may do. Either alone gives the pollers the
//! edge within the process; the first also against other programs on the box.
//!
//! On Linux the nice value belongs to a thread, and `setpriority(PRIO_PROCESS, 0, ...)` sets
//! the calling thread's alone, so each thread sets its own when it starts.

/// The pollers' nice value when the process may raise priorities.
pub const POLLERS_NICE: i32 = -10;
/// The nice value of the process's other busy threads.
pub const BACKGROUND_NICE: i32 = 5;

/// Called by the pollers' thread as it starts.
pub fn pollers_thread() {
    match rustix::process::setpriority_process(None, POLLERS_NICE) {
        Ok(()) => log::debug!("pollers run at nice {POLLERS_NICE}"),
        Err(e) => log::info!(
            "pollers keep nice 0, the other threads run at nice {BACKGROUND_NICE} (raising needs CAP_SYS_NICE: {e})"
        ),
    }
}

/// Called by every other long-lived busy thread as it starts.
pub fn background_thread() {
    if let Err(e) = rustix::process::setpriority_process(None, BACKGROUND_NICE) {
        log::debug!("cannot lower a thread's priority: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_background_thread_lowers_only_its_own_priority() {
        let before = rustix::process::getpriority_process(None).unwrap();
        let inside = std::thread::spawn(|| {
            background_thread();
            rustix::process::getpriority_process(None).unwrap()
        })
        .join()
        .unwrap();
        assert_eq!(inside, BACKGROUND_NICE.max(before));
        assert_eq!(rustix::process::getpriority_process(None).unwrap(), before);
    }
}
