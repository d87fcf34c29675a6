//! A counting gate that bounds how many threads hash at once (`--hash-threads`).
//!
//! Hashing runs on tokio's blocking threads, of which there are many; the gate makes
//! the number that hash *at the same time* a setting, so that the cost of a checksum
//! can be bounded (and measured, as the verification benchmark does with one thread).

use std::sync::{Condvar, Mutex};

/// A blocking counting semaphore.
#[derive(Debug)]
pub(crate) struct Gate {
    places: Mutex<Places>,
    opened: Condvar,
}

#[derive(Debug)]
struct Places {
    free: usize,
    /// Threads waiting for a place: only then does a release wake one (a condition
    /// variable's notify is a system call even when nobody waits, once per block).
    waiting: usize,
}

impl Gate {
    /// A gate that lets `n` (at least one) threads through at once.
    pub fn new(n: usize) -> Self {
        Gate {
            places: Mutex::new(Places {
                free: n.max(1),
                waiting: 0,
            }),
            opened: Condvar::new(),
        }
    }

    /// Runs `f` once a place is free. Call from blocking threads only.
    pub fn run<T>(&self, f: impl FnOnce() -> T) -> T {
        {
            let mut p = self.places.lock().expect("gate lock");
            while p.free == 0 {
                p.waiting += 1;
                p = self.opened.wait(p).expect("gate lock");
                p.waiting -= 1;
            }
            p.free -= 1;
        }
        // Give the place back even if `f` panics.
        struct Release<'a>(&'a Gate);
        impl Drop for Release<'_> {
            fn drop(&mut self) {
                let mut p = self.0.places.lock().expect("gate lock");
                p.free += 1;
                if p.waiting > 0 {
                    self.0.opened.notify_one();
                }
            }
        }
        let _release = Release(self);
        f()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

    #[test]
    fn never_more_than_n_inside() {
        let gate = Gate::new(2);
        let inside = AtomicUsize::new(0);
        let most = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for _ in 0..50 {
                        gate.run(|| {
                            let now = inside.fetch_add(1, SeqCst) + 1;
                            most.fetch_max(now, SeqCst);
                            std::thread::yield_now();
                            inside.fetch_sub(1, SeqCst);
                        });
                    }
                });
            }
        });
        assert!(most.load(SeqCst) <= 2);
        assert!(most.load(SeqCst) >= 1);
    }
}
