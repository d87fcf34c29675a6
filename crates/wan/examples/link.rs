//! Manual check of the delay line (root): `cargo run -p hetch-wan --example link -- 50`
//! makes the two hosts of the testbed joined by a link of the given RTT in ms and forwards
//! until killed. `hetch wan up` does the same as a background process.

use std::time::Duration;

use hetch_wan::{forward, testbed};

fn main() -> std::io::Result<()> {
    let rtt_ms: u64 = std::env::args()
        .nth(1)
        .map_or(50, |s| s.parse().expect("RTT in ms"));
    let link = testbed::Link {
        rtt: Duration::from_millis(rtt_ms),
        rate: 0,
        loss: 0.0,
        corrupt: 0.0,
        mtu: 9000,
        tuned: true,
    };
    let ports = testbed::create(1, &link)?;
    let _counters = forward::start(ports, link.direction(), 1, Default::default());
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}
