//! Taking queued work in batches: a writer or verifier that finds several small
//! blocks waiting handles them in one trip to a blocking thread instead of one trip
//! each. On small files, those trips (a wake-up of a blocking thread, then of the
//! task awaiting it) cost more CPU than writing the block itself.

/// Most items in one batch.
pub(crate) const MAX_ITEMS: usize = 64;
/// A batch stops growing once its items hold this many bytes: large blocks go one at
/// a time, so that every writer keeps a share of them.
pub(crate) const MAX_BYTES: usize = 1 << 20;

/// `first`, followed by whatever else is queued in `rx` right now, up to
/// [`MAX_ITEMS`] items or [`MAX_BYTES`] bytes (as `bytes` counts an item).
pub(crate) fn take_batch<T>(
    first: T,
    rx: &async_channel::Receiver<T>,
    bytes: impl Fn(&T) -> usize,
) -> Vec<T> {
    let mut held = bytes(&first);
    let mut batch = vec![first];
    while batch.len() < MAX_ITEMS && held < MAX_BYTES {
        match rx.try_recv() {
            Ok(item) => {
                held += bytes(&item);
                batch.push(item);
            }
            Err(_) => break,
        }
    }
    batch
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_takes_what_is_queued_within_its_bounds() {
        let (tx, rx) = async_channel::unbounded();
        for i in 0..100usize {
            tx.try_send(i).unwrap();
        }
        let first = rx.try_recv().unwrap();
        let b = take_batch(first, &rx, |_| 1);
        assert_eq!(b, (0..MAX_ITEMS).collect::<Vec<_>>());
        // By bytes: the item that crosses the bound is the last one taken.
        let first = rx.try_recv().unwrap();
        let b = take_batch(first, &rx, |_| MAX_BYTES / 2);
        assert_eq!(b, vec![64, 65]);
        // Nothing queued: the first item alone.
        let (_tx2, rx2) = async_channel::unbounded::<usize>();
        assert_eq!(take_batch(7, &rx2, |_| 1), vec![7]);
    }
}
