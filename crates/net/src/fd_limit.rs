//! The process's open-file limit: servers raise the soft limit to the hard one at
//! start, and size what they let callers hold from the result, so that a full house
//! of connections can never leave the server without a descriptor for its own files.

/// Raises the soft limit on open files to the hard limit; returns the soft limit now
/// in force (unchanged if it could not be raised; `u64::MAX` for no limit).
pub fn raise_fd_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct given.
    #[allow(unsafe_code)]
    let got = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    if got != 0 {
        return u64::MAX;
    }
    if lim.rlim_cur < lim.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        #[allow(unsafe_code)]
        let set = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) };
        if set == 0 {
            lim.rlim_cur = lim.rlim_max;
        }
    }
    match lim.rlim_cur {
        libc::RLIM_INFINITY => u64::MAX,
        n => n,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_soft_limit_ends_at_the_hard_one() {
        let now = super::raise_fd_limit();
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        #[allow(unsafe_code)]
        let got = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
        assert_eq!(got, 0);
        assert_eq!(lim.rlim_cur, lim.rlim_max);
        assert!(now > 0);
    }
}
