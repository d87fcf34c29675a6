//! A bounded, reused pool of block buffers.
//!
//! Every block on either side lives in a buffer from this pool, and the pool never hands
//! out more than its budget: a reader that wants a buffer waits until a sender or writer
//! returns one. Buffers are kept by power-of-two size class and reused, so a transfer of
//! a million small files does not allocate a million times, and memory is set by the
//! budget, not by the dataset.

use std::collections::HashMap;
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

#[derive(Debug, Default)]
struct Shelf {
    free: HashMap<usize, Vec<Vec<u8>>>,
    /// Capacity of all buffers on the shelf.
    shelved: usize,
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
        let units = budget.div_ceil(UNIT).max(MIN_CLASS / UNIT);
        BufferPool {
            budget: units * UNIT,
            permits: Arc::new(Semaphore::new(units)),
            shelf: Arc::default(),
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
                    Vec::with_capacity(class)
                }
            }
        };
        // SAFETY-free zero fill only when growing: resize is cheap for reused buffers.
        buf.resize(len, 0);
        PooledBuf {
            buf,
            class,
            _permit: permit,
            shelf: self.shelf.clone(),
        }
    }
}

/// A buffer lent by a [`BufferPool`]; it goes back to the pool when dropped.
#[derive(Debug)]
pub struct PooledBuf {
    buf: Vec<u8>,
    class: usize,
    _permit: OwnedSemaphorePermit,
    shelf: Arc<Mutex<Shelf>>,
}

impl Deref for PooledBuf {
    type Target = Vec<u8>;
    fn deref(&self) -> &Vec<u8> {
        &self.buf
    }
}

impl AsRef<[u8]> for PooledBuf {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl DerefMut for PooledBuf {
    fn deref_mut(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }
}

impl Drop for PooledBuf {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.buf);
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
            .all(|b| b.len() == 1024 && b.capacity() < MIN_CHARGE));
    }

    #[tokio::test]
    async fn oversized_request_is_capped_not_deadlocked() {
        let pool = BufferPool::new(64 << 10);
        let big = pool.get(64 << 10).await;
        assert_eq!(big.len(), 64 << 10);
    }
}
