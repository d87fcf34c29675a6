//! Damaging a TCP segment the way a faulty link, NIC or middlebox occasionally does
//! and TCP then fails to notice: one payload byte changed and the TCP checksum made
//! valid again, so the damaged bytes reach the application. Stone and Partridge
//! ("When the CRC and TCP checksum disagree", SIGCOMM 2000) found between one in 16
//! million and one in 10 billion packets passing a wrong TCP checksum; this is what
//! end-to-end checks (hetch's block digests, TLS's record MACs) exist for.

/// IP protocol number of TCP.
const TCP: u8 = 6;

/// Flips bits of one payload byte of an IPv4 TCP segment (the byte chosen by `pick`,
/// the bits by `mask`, which must not be 0) and recomputes the TCP checksum. Returns
/// false, leaving `packet` alone, for anything else (not IPv4, not TCP, a fragment, no
/// payload, a malformed header).
pub fn damage_tcp_payload(packet: &mut [u8], pick: u64, mask: u8) -> bool {
    let Some((ip_len, tcp_start, payload_start)) = tcp_layout(packet) else {
        return false;
    };
    if payload_start >= ip_len || mask == 0 {
        return false;
    }
    let at = payload_start + (pick % (ip_len - payload_start) as u64) as usize;
    packet[at] ^= mask;
    let sum = tcp_checksum(&packet[..ip_len], tcp_start);
    packet[tcp_start + 16..tcp_start + 18].copy_from_slice(&sum.to_be_bytes());
    true
}

/// (IP total length, TCP header start, payload start) of an unfragmented IPv4 TCP
/// segment that fits in `packet`.
fn tcp_layout(packet: &[u8]) -> Option<(usize, usize, usize)> {
    let first = *packet.first()?;
    if first >> 4 != 4 {
        return None;
    }
    let ihl = usize::from(first & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([*packet.get(2)?, *packet.get(3)?]));
    let fragment = u16::from_be_bytes([*packet.get(6)?, *packet.get(7)?]);
    // A fragment (more fragments, or a non-zero offset) carries part of a segment:
    // its checksum cannot be fixed from this packet alone.
    if ihl < 20 || total > packet.len() || total < ihl + 20 || fragment & 0x3fff != 0 {
        return None;
    }
    if packet[9] != TCP {
        return None;
    }
    let data_offset = usize::from(packet[ihl + 12] >> 4) * 4;
    if data_offset < 20 || ihl + data_offset > total {
        return None;
    }
    Some((total, ihl, ihl + data_offset))
}

/// The TCP checksum of the segment at `tcp_start` of `ip` (an IPv4 packet of exactly
/// its total length), computed with the checksum field taken as zero.
fn tcp_checksum(ip: &[u8], tcp_start: usize) -> u16 {
    let segment = &ip[tcp_start..];
    let mut sum: u32 = 0;
    let mut add = |bytes: &[u8]| {
        for pair in bytes.chunks(2) {
            let word = u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]);
            sum += u32::from(word);
        }
    };
    add(&ip[12..20]); // source and destination addresses
    add(&[0, TCP]);
    add(&(segment.len() as u16).to_be_bytes());
    add(&segment[..16]);
    add(&segment[18..]);
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A TCP segment 10.0.0.1:1000 -> 10.0.0.2:2000 carrying `payload`, with a valid
    /// checksum.
    pub(crate) fn segment(payload: &[u8]) -> Vec<u8> {
        let total = 20 + 20 + payload.len();
        let mut p = vec![0u8; total];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        p[8] = 64;
        p[9] = TCP;
        p[12..16].copy_from_slice(&[10, 0, 0, 1]);
        p[16..20].copy_from_slice(&[10, 0, 0, 2]);
        p[20..22].copy_from_slice(&1000u16.to_be_bytes());
        p[22..24].copy_from_slice(&2000u16.to_be_bytes());
        p[32] = 5 << 4;
        p[40..].copy_from_slice(payload);
        let sum = tcp_checksum(&p, 20);
        p[36..38].copy_from_slice(&sum.to_be_bytes());
        p
    }

    /// Whether the TCP checksum of `p` verifies (the one's complement sum over the
    /// pseudo-header and segment, checksum included, is all ones).
    fn verifies(p: &[u8]) -> bool {
        let stored = u16::from_be_bytes([p[36], p[37]]);
        tcp_checksum(p, 20) == stored
    }

    #[test]
    fn one_payload_byte_changes_and_the_checksum_still_verifies() {
        for (len, pick) in [(1usize, 0u64), (1000, 7), (1001, 999_999), (1460, 1)] {
            let payload: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
            let clean = segment(&payload);
            assert!(verifies(&clean));
            let mut p = clean.clone();
            assert!(damage_tcp_payload(&mut p, pick, 0x10));
            let changed: Vec<usize> = (0..p.len())
                .filter(|i| p[*i] != clean[*i] && !(36..38).contains(i))
                .collect();
            assert_eq!(changed.len(), 1, "one byte changed");
            assert!(changed[0] >= 40, "in the payload, not the headers");
            assert!(verifies(&p), "the damage is invisible to TCP");
        }
    }

    #[test]
    fn other_packets_are_left_alone() {
        let mut no_payload = segment(&[]);
        assert!(!damage_tcp_payload(&mut no_payload, 3, 1));
        let mut udp = segment(b"data");
        udp[9] = 17;
        let before = udp.clone();
        assert!(!damage_tcp_payload(&mut udp, 3, 1));
        assert_eq!(udp, before);
        let mut fragment = segment(b"data");
        fragment[6] = 0x20; // more fragments
        assert!(!damage_tcp_payload(&mut fragment, 3, 1));
        let mut v6 = segment(b"data");
        v6[0] = 0x60;
        assert!(!damage_tcp_payload(&mut v6, 3, 1));
        let mut short = segment(b"data");
        short.truncate(30);
        assert!(!damage_tcp_payload(&mut short, 3, 1));
        assert!(!damage_tcp_payload(&mut [], 3, 1));
    }
}
