//! Tests: the oracle throughout is `blake3::hash` of the whole file, i.e. `b3sum`.

use super::*;
use proptest::prelude::*;

const CHUNK: u64 = blake3::CHUNK_LEN as u64;

/// Deterministic, non-repeating test bytes (splitmix64), so that a swapped or
/// misplaced block changes the hash.
fn test_data(len: u64, seed: u64) -> Vec<u8> {
    let mut state = seed;
    let mut out = Vec::with_capacity(len as usize + 8);
    while (out.len() as u64) < len {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        out.extend_from_slice(&z.to_le_bytes());
    }
    out.truncate(len as usize);
    out
}

/// Block digests of `data`, by index.
fn digests(data: &[u8], block_size: u64) -> Vec<Digest> {
    let file_len = data.len() as u64;
    (0..block_count(file_len, block_size))
        .map(|i| {
            let start = (i * block_size) as usize;
            let len = block_len(file_len, block_size, i) as usize;
            block_digest(file_len, block_size, i, &data[start..start + len])
        })
        .collect()
}

/// Merges the block digests of `data` in the given order of indices.
fn merge_in_order(data: &[u8], block_size: u64, order: &[u64]) -> Digest {
    let ds = digests(data, block_size);
    let mut fd = FileDigest::new(data.len() as u64, block_size);
    for &i in order {
        fd.add(i, ds[i as usize]).unwrap();
        assert!(fd.stack.len() <= 64);
    }
    fd.finish().unwrap()
}

/// Checks in-order, reverse, evens-then-odds and outside-in orders against b3sum.
fn check_all_orders(file_len: u64, block_size: u64) {
    let data = test_data(file_len, file_len ^ block_size);
    let expected = *blake3::hash(&data).as_bytes();
    let n = block_count(file_len, block_size);
    let forward: Vec<u64> = (0..n).collect();
    let reverse: Vec<u64> = (0..n).rev().collect();
    let evens_odds: Vec<u64> = (0..n).step_by(2).chain((1..n).step_by(2)).collect();
    let outside_in: Vec<u64> = (0..n)
        .map(|k| if k % 2 == 0 { k / 2 } else { n - 1 - k / 2 })
        .collect();
    for order in [forward, reverse, evens_odds, outside_in] {
        assert_eq!(
            merge_in_order(&data, block_size, &order),
            expected,
            "file_len {file_len}, block_size {block_size}, order {order:?}"
        );
    }
}

#[test]
fn check_block_size_accepts_powers_of_two_in_range() {
    let mut size = MIN_BLOCK_SIZE;
    while size <= MAX_BLOCK_SIZE {
        assert_eq!(check_block_size(size), Ok(()));
        size *= 2;
    }
    for bad in [
        0,
        1,
        2,
        512,
        1023,
        1025,
        3 * 1024,
        MAX_BLOCK_SIZE - 1,
        MAX_BLOCK_SIZE + 1,
        MAX_BLOCK_SIZE * 2,
        1 << 63,
        u64::MAX,
    ] {
        assert_eq!(
            check_block_size(bad),
            Err(IntegrityError::BadBlockSize(bad))
        );
    }
}

#[test]
fn block_count_cases() {
    assert_eq!(block_count(0, 1024), 1);
    assert_eq!(block_count(1, 1024), 1);
    assert_eq!(block_count(1023, 1024), 1);
    assert_eq!(block_count(1024, 1024), 1);
    assert_eq!(block_count(1025, 1024), 2);
    assert_eq!(block_count(2048, 1024), 2);
    assert_eq!(block_count(2049, 1024), 3);
    assert_eq!(block_count(37 * 4096, 4096), 37);
    assert_eq!(block_count(37 * 4096 + 1, 4096), 38);
    assert_eq!(block_count(u64::MAX, 1024), 1 << 54);
    assert_eq!(block_count(u64::MAX, MAX_BLOCK_SIZE), 1 << 36);
}

#[test]
fn block_len_cases() {
    assert_eq!(block_len(0, 1024, 0), 0);
    assert_eq!(block_len(1, 1024, 0), 1);
    assert_eq!(block_len(1024, 1024, 0), 1024);
    assert_eq!(block_len(1024, 1024, 1), 0);
    assert_eq!(block_len(2500, 1024, 0), 1024);
    assert_eq!(block_len(2500, 1024, 1), 1024);
    assert_eq!(block_len(2500, 1024, 2), 452);
    assert_eq!(block_len(2500, 1024, 3), 0);
    // Past the end never overflows.
    assert_eq!(block_len(u64::MAX, MAX_BLOCK_SIZE, u64::MAX), 0);
    assert_eq!(
        block_len(u64::MAX, MAX_BLOCK_SIZE, (1 << 36) - 1),
        MAX_BLOCK_SIZE - 1
    );
    // The lengths always add up to the file.
    for (file_len, bs) in [(0, 1024), (5000, 1024), (8192, 4096), (8193, 4096)] {
        let total: u64 = (0..block_count(file_len, bs))
            .map(|i| block_len(file_len, bs, i))
            .sum();
        assert_eq!(total, file_len);
    }
}

#[test]
fn single_block_digest_is_plain_hash() {
    for len in [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 4095, 4096] {
        let data = test_data(len, 7);
        assert_eq!(
            block_digest(len, 4096, 0, &data),
            *blake3::hash(&data).as_bytes()
        );
        assert_eq!(
            merge_in_order(&data, 4096, &[0]),
            *blake3::hash(&data).as_bytes()
        );
    }
}

#[test]
fn multi_block_digest_is_not_plain_hash() {
    // A chaining value must differ from the root hash of the same bytes: otherwise a
    // block digest could be passed off as a whole-file hash.
    let data = test_data(2048, 1);
    let d0 = block_digest(2048, 1024, 0, &data[..1024]);
    assert_ne!(d0, *blake3::hash(&data[..1024]).as_bytes());
}

#[test]
fn boundary_lengths() {
    for bs in [1024, 2048, 4096, 8192, 65536] {
        let mut lens = vec![
            0,
            1,
            CHUNK - 1,
            CHUNK,
            CHUNK + 1,
            bs - 1,
            bs,
            bs + 1,
            2 * bs - 1,
            2 * bs,
            2 * bs + 1,
            3 * bs,
            3 * bs + 1,
            4 * bs,
            4 * bs + 1,
            5 * bs + 7,
            7 * bs + CHUNK,
            7 * bs + CHUNK + 1,
            8 * bs,
            8 * bs + 1,
            16 * bs - 1,
            17 * bs + 3,
        ];
        if bs <= 8192 {
            lens.extend([37 * bs, 37 * bs + 1, 37 * bs - 1, 64 * bs, 65 * bs + 999]);
        }
        for len in lens {
            check_all_orders(len, bs);
        }
    }
}

#[test]
fn many_blocks_every_count_up_to_70() {
    // Every block count exercises a different binary decomposition of the stack.
    for n in 1..=70u64 {
        check_all_orders(n * 1024, 1024);
        check_all_orders((n - 1) * 1024 + 1, 1024);
        check_all_orders(n * 2048 - 1000, 2048);
    }
}

#[test]
fn duplicates_keep_the_first() {
    let bs = 1024;
    let data = test_data(5 * bs + 10, 3);
    let ds = digests(&data, bs);
    let mut fd = FileDigest::new(data.len() as u64, bs);
    // Pending duplicate: block 3 arrives early twice, the second one garbage.
    fd.add(3, ds[3]).unwrap();
    fd.add(3, [0xAA; 32]).unwrap();
    fd.add(0, ds[0]).unwrap();
    // Merged duplicate.
    fd.add(0, [0xBB; 32]).unwrap();
    for i in [5, 1, 2, 4] {
        fd.add(i, ds[i as usize]).unwrap();
    }
    // Duplicate after completion changes nothing either.
    fd.add(2, [0xCC; 32]).unwrap();
    assert_eq!(fd.missing(), 0);
    assert_eq!(fd.finish().unwrap(), *blake3::hash(&data).as_bytes());
}

#[test]
fn bad_block_size_reported_by_add_and_finish() {
    for bad in [0, 1000, 1025, 512, MAX_BLOCK_SIZE * 2] {
        let mut fd = FileDigest::new(10_000, bad);
        assert_eq!(fd.add(0, [0; 32]), Err(IntegrityError::BadBlockSize(bad)));
        assert_eq!(fd.finish(), Err(IntegrityError::BadBlockSize(bad)));
    }
}

#[test]
fn out_of_range_index() {
    let mut fd = FileDigest::new(3 * 1024 + 1, 1024);
    for index in [4, 5, u64::MAX] {
        assert_eq!(
            fd.add(index, [0; 32]),
            Err(IntegrityError::BlockOutOfRange { index, blocks: 4 })
        );
    }
    let mut empty = FileDigest::new(0, 1024);
    assert_eq!(
        empty.add(1, [0; 32]),
        Err(IntegrityError::BlockOutOfRange {
            index: 1,
            blocks: 1
        })
    );
    // Nothing was recorded by the failed adds.
    assert_eq!(fd.missing(), 4);
}

#[test]
fn finish_incomplete() {
    assert_eq!(
        FileDigest::new(0, 1024).finish(),
        Err(IntegrityError::Incomplete {
            missing: 1,
            blocks: 1
        })
    );
    let bs = 1024;
    let data = test_data(10 * bs, 9);
    let ds = digests(&data, bs);
    // Merged prefix plus parked blocks are both counted as present.
    let mut fd = FileDigest::new(data.len() as u64, bs);
    for i in [0, 1, 2, 5, 7, 9] {
        fd.add(i, ds[i as usize]).unwrap();
    }
    assert_eq!(fd.missing(), 4);
    assert_eq!(
        fd.finish(),
        Err(IntegrityError::Incomplete {
            missing: 4,
            blocks: 10
        })
    );
    // All but the first block: everything is parked, nothing merged.
    let mut fd = FileDigest::new(data.len() as u64, bs);
    for i in 1..10 {
        fd.add(i, ds[i as usize]).unwrap();
    }
    assert_eq!(
        fd.finish(),
        Err(IntegrityError::Incomplete {
            missing: 1,
            blocks: 10
        })
    );
}

#[test]
fn memory_stays_logarithmic_in_order() {
    // 1000 blocks in order: nothing parked, the stack never exceeds popcount + 1.
    let bs = 1024;
    let n = 1000u64;
    let data = test_data(n * bs, 11);
    let ds = digests(&data, bs);
    let mut fd = FileDigest::new(n * bs, bs);
    for i in 0..n {
        fd.add(i, ds[i as usize]).unwrap();
        assert!(fd.pending.is_empty());
        assert!(
            fd.stack.len() <= 10,
            "stack {} at block {i}",
            fd.stack.len()
        );
    }
    assert_eq!(fd.finish().unwrap(), *blake3::hash(&data).as_bytes());
}

#[test]
fn parked_blocks_drain_when_the_gap_fills() {
    let bs = 1024;
    let data = test_data(20 * bs, 13);
    let ds = digests(&data, bs);
    let mut fd = FileDigest::new(data.len() as u64, bs);
    for i in 1..20 {
        fd.add(i, ds[i as usize]).unwrap();
    }
    assert_eq!(fd.pending.len(), 19);
    fd.add(0, ds[0]).unwrap();
    assert!(fd.pending.is_empty());
    assert!(fd.stack.is_empty());
    assert_eq!(fd.finish().unwrap(), *blake3::hash(&data).as_bytes());
}

#[test]
#[should_panic(expected = "must be 1024 bytes")]
fn block_digest_rejects_wrong_length() {
    block_digest(4096, 1024, 1, &[0; 1000]);
}

#[test]
#[should_panic(expected = "outside a file of 4 blocks")]
fn block_digest_rejects_out_of_range() {
    block_digest(4096, 1024, 4, &[]);
}

#[test]
#[should_panic(expected = "block size 1000")]
fn block_digest_rejects_bad_block_size() {
    block_digest(4096, 1000, 0, &[0; 1000]);
}

/// File lengths biased towards block and chunk boundaries, where bugs live.
fn file_len_strategy(block_size: u64, max_blocks: u64) -> impl Strategy<Value = u64> {
    let max = max_blocks * block_size;
    prop_oneof![
        0..=max,
        (0..=max_blocks, -2i64..=2)
            .prop_map(move |(k, d)| { (k * block_size).saturating_add_signed(d).min(max) }),
        (0..=max_blocks, 0..block_size / CHUNK, -1i64..=1).prop_map(move |(k, c, d)| {
            (k * block_size + c * CHUNK)
                .saturating_add_signed(d)
                .min(max)
        }),
    ]
}

/// (block size, file length, arrival order, data seed).
fn case_strategy() -> impl Strategy<Value = (u64, u64, Vec<u64>, u64)> {
    let small = (prop::sample::select(vec![1024u64, 2048, 4096, 8192]))
        .prop_flat_map(|bs| (Just(bs), file_len_strategy(bs, 40)));
    let large = (prop::sample::select(vec![65536u64, 1 << 20]))
        .prop_flat_map(|bs| (Just(bs), file_len_strategy(bs, 5)));
    prop_oneof![4 => small, 1 => large].prop_flat_map(|(bs, len)| {
        let order: Vec<u64> = (0..block_count(len, bs)).collect();
        (
            Just(bs),
            Just(len),
            Just(order).prop_shuffle(),
            any::<u64>(),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn merged_block_digests_equal_b3sum((bs, len, order, seed) in case_strategy()) {
        let data = test_data(len, seed);
        prop_assert_eq!(
            merge_in_order(&data, bs, &order),
            *blake3::hash(&data).as_bytes()
        );
    }

    #[test]
    fn merge_with_duplicates_equals_b3sum(
        (bs, len, order, seed) in case_strategy(),
        dup_every in 1usize..5,
    ) {
        // Re-adding earlier blocks (with garbage) in between must not change the result.
        let data = test_data(len, seed);
        let ds = digests(&data, bs);
        let mut fd = FileDigest::new(len, bs);
        for (k, &i) in order.iter().enumerate() {
            fd.add(i, ds[i as usize]).unwrap();
            if k % dup_every == 0 {
                fd.add(order[k / 2], [0x5A; 32]).unwrap();
            }
            prop_assert_eq!(fd.missing(), order.len() as u64 - k as u64 - 1);
        }
        prop_assert_eq!(fd.finish().unwrap(), *blake3::hash(&data).as_bytes());
    }
}

#[test]
fn huge_file_needs_no_memory_up_front() {
    // Only the block count is stored: a 16 EiB file costs nothing until blocks arrive.
    let fd = FileDigest::new(u64::MAX, 1024);
    assert_eq!(fd.missing(), 1 << 54);
    assert_eq!(
        fd.finish(),
        Err(IntegrityError::Incomplete {
            missing: 1 << 54,
            blocks: 1 << 54
        })
    );
}
