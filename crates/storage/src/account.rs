//! A local account, and file-system access with its rights from one thread: how a
//! service running as root lists a user's sources as that user, so that the file
//! system's own permissions and ACLs decide what the listing shows, as they do for
//! anything the user runs.

use std::ffi::CString;
use std::io;

/// Supplementary groups of an account looked up at most.
const MAX_GROUPS: usize = 65_536;

/// A local account of this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    /// Its name.
    pub name: String,
    /// Its user id.
    pub uid: libc::uid_t,
    /// Its primary group id.
    pub gid: libc::gid_t,
    /// Every group it is in, the primary one included.
    pub groups: Vec<libc::gid_t>,
}

/// Whether this process runs as root (and so may act as another account).
pub fn running_as_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

impl Account {
    /// Account `name` as this host's user database has it; root is refused (a
    /// user's work never runs as root).
    pub fn lookup(name: &str) -> io::Result<Account> {
        let fail =
            |why: String| io::Error::new(io::ErrorKind::NotFound, format!("account {name}: {why}"));
        let cname = CString::new(name).map_err(|_| fail("not a name".into()))?;
        // SAFETY: all-zero is a valid `passwd` (null pointers, zero ids).
        let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
        let mut buf = vec![0 as libc::c_char; 64 << 10];
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: every pointer is to memory owned here, of the size given.
        let r = unsafe {
            libc::getpwnam_r(
                cname.as_ptr(),
                &mut pwd,
                buf.as_mut_ptr(),
                buf.len(),
                &mut found,
            )
        };
        if r != 0 || found.is_null() {
            return Err(fail("no such user on this host".into()));
        }
        if pwd.pw_uid == 0 {
            return Err(fail("is root: a user's work never runs as root".into()));
        }
        let mut groups: Vec<libc::gid_t> = vec![0; 64];
        loop {
            let mut n = groups.len() as libc::c_int;
            // SAFETY: `groups` holds `n` entries; getgrouplist writes at most that many
            // and says how many it needs when they do not fit.
            let r = unsafe {
                libc::getgrouplist(cname.as_ptr(), pwd.pw_gid, groups.as_mut_ptr(), &mut n)
            };
            if r >= 0 {
                groups.truncate(n.max(0) as usize);
                break;
            }
            let want = (n.max(0) as usize).max(groups.len() * 2);
            if want > MAX_GROUPS {
                return Err(fail(format!("more than {MAX_GROUPS} groups")));
            }
            groups.resize(want, 0);
        }
        Ok(Account {
            name: name.to_string(),
            uid: pwd.pw_uid,
            gid: pwd.pw_gid,
            groups,
        })
    }

    /// Gives the calling thread this account's rights on the file system: its
    /// groups, then its file-system group and user ids. These are per-thread system
    /// calls (glibc's `setgroups` would change every thread of the process), and a
    /// file-system user id other than 0 takes root's file capabilities from the
    /// thread, so permissions and ACLs are checked as for the account. For a thread
    /// made for the purpose, which ends with the work; needs root.
    pub fn act_on_this_thread(&self) -> io::Result<()> {
        let fail = |call: &str, e: io::Error| {
            io::Error::new(e.kind(), format!("account {}: {call}: {e}", self.name))
        };
        // SAFETY: plain system calls on values owned here.
        unsafe {
            let set = libc::syscall(libc::SYS_setgroups, self.groups.len(), self.groups.as_ptr());
            if set != 0 {
                return Err(fail("setgroups", io::Error::last_os_error()));
            }
            // setfsuid and setfsgid say nothing of failure: each returns the id before
            // the call, so a second call tells whether the first took.
            libc::setfsgid(self.gid);
            if libc::setfsgid(self.gid) as libc::gid_t != self.gid {
                return Err(fail(
                    "setfsgid",
                    io::Error::from(io::ErrorKind::PermissionDenied),
                ));
            }
            libc::setfsuid(self.uid);
            if libc::setfsuid(self.uid) as libc::uid_t != self.uid {
                return Err(fail(
                    "setfsuid",
                    io::Error::from(io::ErrorKind::PermissionDenied),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn unknown_accounts_and_root_are_refused_by_name() {
        let e = Account::lookup("no-such-user-here")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no-such-user-here") && e.contains("no such user"),
            "{e}"
        );
        let e = Account::lookup("root").unwrap_err().to_string();
        assert!(e.contains("is root"), "{e}");
    }

    #[test]
    fn a_thread_acting_as_an_account_has_its_rights_and_the_others_keep_theirs() {
        let Ok(nobody) = Account::lookup("nobody") else {
            return; // no such account here: nothing to act as
        };
        if !running_as_root() {
            // Acting as another account needs root; without it, it fails and says so.
            let e = std::thread::spawn(move || nobody.act_on_this_thread())
                .join()
                .unwrap()
                .unwrap_err();
            assert!(e.to_string().contains("account nobody"), "{e}");
            return;
        }
        let t = tempfile::tempdir().unwrap();
        std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let closed = t.path().join("closed");
        std::fs::write(&closed, b"root only").unwrap();
        std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o600)).unwrap();
        let open = t.path().join("open");
        std::fs::write(&open, b"anyone").unwrap();
        let (c, o) = (closed.clone(), open.clone());
        let as_nobody = std::thread::spawn(move || {
            nobody.act_on_this_thread().unwrap();
            (
                std::fs::read(&c).map_err(|e| e.kind()),
                std::fs::read(&o).is_ok(),
            )
        })
        .join()
        .unwrap();
        assert_eq!(as_nobody, (Err(io::ErrorKind::PermissionDenied), true));
        // This thread, and the process, are still root.
        assert_eq!(std::fs::read(&closed).unwrap(), b"root only");
        assert!(running_as_root());
    }
}
