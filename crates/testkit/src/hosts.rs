//! A hosts file of a test's own: what a name resolves to through the system's
//! resolver (`getaddrinfo`, as the code under test calls it), without DNS or a change
//! to the machine. The file is bind-mounted over `/etc/hosts` in a private mount
//! namespace of one thread; the threads that thread starts (a tokio runtime's
//! workers and its blocking pool, where lookups run) share that namespace, and the
//! rest of the machine never sees it.

use std::io::Write as _;

/// Runs `f` on a thread of its own that (with every thread it starts) resolves
/// through a hosts file of the machine's lines and then `lines`; `Err` says why that
/// cannot be done here (it takes root, or `CAP_SYS_ADMIN`).
pub fn with_hosts<T, F>(lines: &str, f: F) -> Result<T, String>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let mut text = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(lines);
    let mut file = tempfile::NamedTempFile::new().map_err(|e| format!("hosts file: {e}"))?;
    file.write_all(text.as_bytes())
        .map_err(|e| format!("hosts file: {e}"))?;
    let path = std::ffi::CString::new(file.path().as_os_str().as_encoded_bytes())
        .map_err(|e| e.to_string())?;
    let thread = std::thread::spawn(move || {
        private_hosts(&path)?;
        Ok(f())
    });
    let got = thread
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p));
    drop(file);
    got
}

/// Gives this thread a mount namespace of its own in which `path` is `/etc/hosts`.
fn private_hosts(path: &std::ffi::CStr) -> Result<(), String> {
    let os = |what: &str| format!("{what}: {}", std::io::Error::last_os_error());
    // SAFETY: plain system calls on this thread's own namespace, with C strings
    // that live across each call.
    unsafe {
        if libc::unshare(libc::CLONE_NEWNS) != 0 {
            return Err(os("unshare(CLONE_NEWNS)"));
        }
        // Private first: on a machine whose `/` is shared (systemd's default), the
        // bind mount would otherwise show in the machine's own namespace too.
        let none = std::ptr::null();
        if libc::mount(
            none,
            c"/".as_ptr(),
            none,
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ) != 0
        {
            return Err(os("making / private"));
        }
        if libc::mount(
            path.as_ptr(),
            c"/etc/hosts".as_ptr(),
            none,
            libc::MS_BIND,
            std::ptr::null(),
        ) != 0
        {
            return Err(os("bind-mounting a hosts file on /etc/hosts"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_resolve_through_the_threads_hosts_file_and_nowhere_else() {
        let lookup = |name: &str| -> Vec<std::net::IpAddr> {
            use std::net::ToSocketAddrs as _;
            (name, 0)
                .to_socket_addrs()
                .map(|a| a.map(|a| a.ip()).collect())
                .unwrap_or_default()
        };
        let got = with_hosts("192.0.2.7 hetch-hosts-test.invalid\n", move || {
            // On a thread started from there, as a runtime's would be.
            std::thread::spawn(move || lookup("hetch-hosts-test.invalid"))
                .join()
                .unwrap()
        });
        match got {
            Ok(ips) => assert_eq!(ips, ["192.0.2.7".parse::<std::net::IpAddr>().unwrap()]),
            Err(why) => return crate::skipped(why),
        }
        assert!(
            lookup("hetch-hosts-test.invalid").is_empty(),
            "it leaked out"
        );
    }
}
