//! A bounded, reused pool of block buffers.
//!
//! Every block on either side lives in a buffer from this pool, and the pool never hands
//! out more than its budget: a reader that wants a buffer waits until a sender or writer
//! returns one. Buffers are kept by power-of-two size class and reused, so a transfer of
//! a million small files does not allocate a million times, and memory is set by the
//! budget, not by the dataset.
//!
//! Buffers start on a page boundary ([`ALIGN`]), so a block can be read from or written
//! to a file with direct I/O (`O_DIRECT`) straight from the buffer it travels in.
//!
//! A pool ends with its session, but the process often does not: a server or a worker
//! runs session after session. A pool's idle buffers go to the process's [`Spare`]
//! when it ends, and the next pools take them from there (zeroed first), rather than
//! mapping, faulting in, zeroing and unmapping every buffer afresh for each session.

use std::collections::{BTreeMap, HashMap};
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Smallest size class (bytes).
const MIN_CLASS: usize = 16 << 10;
/// Permits are counted in units of this many bytes.
const UNIT: usize = 1 << 10;
/// Each buffer lent is charged at least this much of the budget. A small buffer costs
/// more than its bytes (its allocation, the pages touched, an entry in some queue),
/// and without a floor a budget sized for large blocks would let thousands of tiny
/// ones pile up in a sink that writes slower than they arrive (a 64 MiB budget:
/// 4,096 buffers of 1 KiB files, 88 MiB of peak RSS on 200,000 files). With it, at
/// most budget / 64 KiB small buffers are out at once (1,024), still far more than
/// the batches of readers and writers take.
const MIN_CHARGE: usize = 64 << 10;

/// Buffers start at a multiple of this many bytes (the alignment direct I/O needs).
pub const ALIGN: usize = 4096;

/// One page of a buffer: a `Vec` of these is allocated (and freed) page-aligned.
#[derive(Clone, Copy)]
#[repr(C, align(4096))]
struct Page([u8; ALIGN]);

/// Page-aligned storage of `len` bytes: what the pool lends, and a scratch buffer of
/// its own for a block read back with direct I/O outside the pool's budget (one per
/// verifier, at most a block long).
#[derive(Default)]
pub struct Pages {
    pages: Vec<Page>,
    len: usize,
}

impl Pages {
    /// Empty; grows with [`Pages::resize`].
    pub fn new() -> Self {
        Self::default()
    }

    fn with_capacity(bytes: usize) -> Self {
        Pages {
            pages: Vec::with_capacity(bytes.div_ceil(ALIGN)),
            len: 0,
        }
    }

    fn capacity(&self) -> usize {
        self.pages.capacity() * ALIGN
    }

    /// Makes the buffer `len` bytes long. Bytes in pages it had already keep what they
    /// held; pages it grows into read as zeros.
    pub fn resize(&mut self, len: usize) {
        let pages = len.div_ceil(ALIGN);
        if pages > self.pages.len() {
            self.pages.resize(pages, Page([0; ALIGN]));
        }
        self.len = len;
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: `Page` is plain bytes with no padding (repr(C), one array of u8), so
        // its initialised pages are `pages.len() * ALIGN` initialised bytes, and
        // `len <= pages.len() * ALIGN` (see `resize`).
        unsafe { std::slice::from_raw_parts(self.pages.as_ptr().cast::<u8>(), self.len) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`; the borrow of `self` is exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.pages.as_mut_ptr().cast::<u8>(), self.len) }
    }
}

impl Deref for Pages {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.bytes()
    }
}

impl DerefMut for Pages {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.bytes_mut()
    }
}

impl std::fmt::Debug for Pages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Pages({} of {} bytes)", self.len, self.capacity())
    }
}

#[derive(Debug)]
struct Shelf {
    free: HashMap<usize, Vec<Pages>>,
    /// Capacity of all buffers on the shelf.
    shelved: usize,
    /// Where the idle buffers go when the pool ends.
    spare: &'static Spare,
}

impl Shelf {
    fn new(spare: &'static Spare) -> Self {
        Shelf {
            free: HashMap::new(),
            shelved: 0,
            spare,
        }
    }
}

impl Drop for Shelf {
    /// The pool and every buffer it lent are gone: its idle buffers are kept for the
    /// process's next pools.
    fn drop(&mut self) {
        self.spare.keep(std::mem::take(&mut self.free));
    }
}

/// At most this many bytes of ended pools' buffers are kept in a process (the default
/// buffer budget of one session). On a worker running units of 20 files of 1 MiB, one
/// session each, faulting in and zeroing fresh buffers was a seventh of its CPU.
pub const SPARE_BYTES: usize = 64 << 20;

/// The process's buffers kept between pools.
static SPARE: Spare = Spare::new(SPARE_BYTES);

/// Buffers of ended pools, by size class, kept for the next pools up to a cap.
#[derive(Debug)]
pub struct Spare {
    cap: usize,
    /// The buffers by class, and their capacity in all.
    held: Mutex<(BTreeMap<usize, Vec<Pages>>, usize)>,
}

impl Spare {
    const fn new(cap: usize) -> Self {
        Spare {
            cap,
            held: Mutex::new((BTreeMap::new(), 0)),
        }
    }

    /// Keeps the buffers of `free` (by class) while the cap allows; drops the rest.
    fn keep(&self, free: HashMap<usize, Vec<Pages>>) {
        let mut held = self.held.lock().expect("spare lock");
        let (by_class, bytes) = &mut *held;
        for (class, bufs) in free {
            for b in bufs {
                if *bytes + b.capacity() > self.cap {
                    return;
                }
                *bytes += b.capacity();
                by_class.entry(class).or_default().push(b);
            }
        }
    }

    /// A kept buffer of size class `class`, zeroed: it may have held another session's
    /// data (another user's, on a worker or a server), which nothing may ever send.
    fn take(&self, class: usize) -> Option<Pages> {
        let mut buf = {
            let mut held = self.held.lock().expect("spare lock");
            let (by_class, bytes) = &mut *held;
            let list = by_class.get_mut(&class)?;
            let b = list.pop()?;
            if list.is_empty() {
                by_class.remove(&class);
            }
            *bytes -= b.capacity();
            b
        };
        buf.pages.fill(Page([0; ALIGN]));
        buf.len = 0;
        Some(buf)
    }

    /// The capacity of the buffers kept now.
    #[cfg(test)]
    fn bytes(&self) -> usize {
        self.held.lock().expect("spare lock").1
    }
}

/// A pool of buffers whose total size in use is bounded.
#[derive(Debug, Clone)]
pub struct BufferPool {
    budget: usize,
    permits: Arc<Semaphore>,
    shelf: Arc<Mutex<Shelf>>,
}

impl BufferPool {
    /// A pool that lends at most `budget` bytes at once (rounded up to size classes).
    pub fn new(budget: usize) -> Self {
        Self::with_spare(budget, &SPARE)
    }

    /// [`BufferPool::new`], taking buffers from and leaving them to `spare`.
    fn with_spare(budget: usize, spare: &'static Spare) -> Self {
        let units = budget.div_ceil(UNIT).max(MIN_CLASS / UNIT);
        BufferPool {
            budget: units * UNIT,
            permits: Arc::new(Semaphore::new(units)),
            shelf: Arc::new(Mutex::new(Shelf::new(spare))),
        }
    }

    fn class(len: usize) -> usize {
        len.max(MIN_CLASS).next_power_of_two()
    }

    /// A buffer of exactly `len` bytes (contents unspecified), waiting while the budget
    /// is used up. `len` larger than the budget is capped at the budget's class.
    pub async fn get(&self, len: usize) -> PooledBuf {
        let (class, units) = self.size(len);
        let permit = self
            .permits
            .clone()
            .acquire_many_owned(units)
            .await
            .expect("pool semaphore is never closed");
        self.lend(len, class, permit)
    }

    /// [`BufferPool::get`] without waiting: `None` while the budget is used up.
    pub fn try_get(&self, len: usize) -> Option<PooledBuf> {
        let (class, units) = self.size(len);
        let permit = self.permits.clone().try_acquire_many_owned(units).ok()?;
        Some(self.lend(len, class, permit))
    }

    /// The size class of a buffer of `len` bytes, and the permits it takes.
    fn size(&self, len: usize) -> (usize, u32) {
        let class = Self::class(len).min(self.budget.next_power_of_two());
        let charge = class.max(MIN_CHARGE);
        (class, (charge / UNIT).min(self.budget / UNIT) as u32)
    }

    fn lend(&self, len: usize, class: usize, permit: OwnedSemaphorePermit) -> PooledBuf {
        let mut buf = {
            let mut shelf = self.shelf.lock().expect("pool lock");
            match shelf.free.get_mut(&class).and_then(|v| v.pop()) {
                Some(b) => {
                    shelf.shelved -= b.capacity();
                    b
                }
                None => {
                    // Keep shelved + lent within twice the budget: drop idle buffers of
                    // other classes before allocating a new one.
                    while shelf.shelved > 0 && shelf.shelved + class > self.budget {
                        let key = *shelf.free.keys().next().expect("shelved > 0");
                        let list = shelf.free.get_mut(&key).expect("key exists");
                        let dropped = list.pop().map(|b| b.capacity()).unwrap_or(0);
                        if list.is_empty() {
                            shelf.free.remove(&key);
                        }
                        shelf.shelved -= dropped;
                    }
                    let spare = shelf.spare;
                    drop(shelf);
                    spare
                        .take(class)
                        .unwrap_or_else(|| Pages::with_capacity(class))
                }
            }
        };
        // Zero fill only when growing: cheap for reused buffers.
        buf.resize(len);
        PooledBuf {
            buf,
            class,
            _permit: permit,
            shelf: self.shelf.clone(),
        }
    }
}

/// A buffer lent by a [`BufferPool`], page-aligned ([`ALIGN`]); it goes back to the
/// pool when dropped.
#[derive(Debug)]
pub struct PooledBuf {
    buf: Pages,
    class: usize,
    _permit: OwnedSemaphorePermit,
    shelf: Arc<Mutex<Shelf>>,
}

impl PooledBuf {
    /// Makes the buffer `len` bytes long (contents past the earlier length
    /// unspecified, as those of a buffer just lent), reallocating only beyond its
    /// capacity.
    pub fn resize(&mut self, len: usize) {
        self.buf.resize(len);
    }

    /// Shortens the buffer to `len` bytes (no effect if it is shorter).
    pub fn truncate(&mut self, len: usize) {
        self.buf.len = self.buf.len.min(len);
    }
}

impl Deref for PooledBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.buf.bytes()
    }
}

impl AsRef<[u8]> for PooledBuf {
    fn as_ref(&self) -> &[u8] {
        self.buf.bytes()
    }
}

impl DerefMut for PooledBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.buf.bytes_mut()
    }
}

impl Drop for PooledBuf {
    fn drop(&mut self) {
        let buf = std::mem::replace(&mut self.buf, Pages::with_capacity(0));
        if buf.capacity() >= self.class {
            let mut shelf = self.shelf.lock().expect("pool lock");
            shelf.shelved += buf.capacity();
            shelf.free.entry(self.class).or_default().push(buf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn budget_bounds_buffers_in_use_and_buffers_are_reused() {
        let pool = BufferPool::new(256 << 10);
        let a = pool.get(100 << 10).await;
        let b = pool.get(100 << 10).await;
        assert_eq!(a.len(), 100 << 10);
        // Two 128 KiB classes use the whole budget: a third must wait.
        let third = tokio::time::timeout(std::time::Duration::from_millis(50), pool.get(1)).await;
        assert!(third.is_err(), "pool lent more than its budget");
        let ptr = a.as_ptr();
        drop(a);
        let c = pool.get(120 << 10).await;
        assert_eq!(c.as_ptr(), ptr, "buffer was not reused");
        drop((b, c));
        assert!(pool.shelf.lock().unwrap().shelved <= 256 << 10);
    }

    #[tokio::test]
    async fn try_get_lends_only_what_the_budget_has_free() {
        let pool = BufferPool::new(256 << 10);
        let a = pool.try_get(100 << 10).expect("budget free");
        let b = pool.try_get(100 << 10).expect("budget free");
        assert!(pool.try_get(1).is_none(), "lent more than its budget");
        drop(a);
        assert_eq!(pool.try_get(5).map(|c| c.len()), Some(5));
        drop(b);
    }

    #[tokio::test]
    async fn small_buffers_are_charged_the_floor_so_few_are_out_at_once() {
        let pool = BufferPool::new(4 * MIN_CHARGE);
        let lent: Vec<_> = (0..4).map(|_| pool.try_get(1024).expect("free")).collect();
        assert!(pool.try_get(1024).is_none(), "a fifth tiny buffer was lent");
        assert!(lent
            .iter()
            .all(|b| b.len() == 1024 && b.buf.capacity() < MIN_CHARGE));
    }

    #[tokio::test]
    async fn buffers_are_page_aligned_and_grow_with_zeros() {
        let pool = BufferPool::new(1 << 20);
        let mut a = pool.get(5000).await;
        assert_eq!(a.as_ptr() as usize % ALIGN, 0);
        assert!(a.iter().all(|&b| b == 0));
        a.fill(7);
        a.truncate(10);
        assert_eq!(&a[..], &[7; 10]);
        a.resize(3 * ALIGN + 1);
        assert_eq!(a.len(), 3 * ALIGN + 1);
        assert_eq!(a[3 * ALIGN], 0, "a page added by growing reads as zeros");
        drop(a);
        let b = pool.get(300 << 10).await;
        assert_eq!(b.as_ptr() as usize % ALIGN, 0);
    }

    #[tokio::test]
    async fn an_ended_pools_buffers_serve_the_next_pool_zeroed_within_the_cap() {
        let spare: &'static Spare = Box::leak(Box::new(Spare::new(1 << 20)));
        let first = BufferPool::with_spare(8 << 20, spare);
        let mut lent = [first.get(1 << 20).await, first.get(1 << 20).await];
        lent.iter_mut().for_each(|b| b.fill(0xaa));
        let ptrs = lent.each_ref().map(|b| b.as_ptr());
        drop(lent);
        assert_eq!(spare.bytes(), 0, "kept while its pool lives");
        drop(first);
        // Two idle buffers of 1 MiB, a cap of 1 MiB: one is kept, one dropped.
        assert_eq!(spare.bytes(), 1 << 20);
        let next = BufferPool::with_spare(8 << 20, spare);
        let b = next.get(1 << 20).await;
        assert!(ptrs.contains(&b.as_ptr()), "the kept buffer was not reused");
        assert!(
            b.iter().all(|&x| x == 0),
            "another session's bytes were lent"
        );
        assert_eq!(spare.bytes(), 0);
    }

    #[tokio::test]
    async fn oversized_request_is_capped_not_deadlocked() {
        let pool = BufferPool::new(64 << 10);
        let big = pool.get(64 << 10).await;
        assert_eq!(big.len(), 64 << 10);
    }
}
