//! Channel queue speed: push 200-byte notification events and take them back as 10 000-event
//! NotificationMessage bodies. Run with `cargo bench -p devicehub-codec --bench queue`.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use devicehub_codec::queue::{
    ChannelQueue, DEFAULT_LIFETIME_MS, DEFAULT_MAX_BYTES, KIND_NOTIFICATION,
};

const EVENTS: usize = 10_000;

fn event() -> Vec<u8> {
    let mut data = br#"{"ep":"0123456789abcdef0123456789abcdef","path":"/3303/0/5700","ct":"text/plain","payload":""#
        .to_vec();
    data.resize(190, b'A');
    data.extend_from_slice(br#"","max-age":0}"#);
    data
}

fn push_and_take(c: &mut Criterion) {
    let data = event();
    let mut group = c.benchmark_group("queue");
    group.throughput(Throughput::Elements(EVENTS as u64));
    group.bench_function("push_take_10000x200B", |b| {
        b.iter(|| {
            let mut queue = ChannelQueue::new(DEFAULT_MAX_BYTES, DEFAULT_LIFETIME_MS).unwrap();
            for n in 0..EVENTS {
                queue
                    .push(KIND_NOTIFICATION, data.clone(), n as u64)
                    .unwrap();
            }
            black_box(queue.take_batch(EVENTS, EVENTS as u64).unwrap())
        })
    });
    group.finish();
}

criterion_group!(benches, push_and_take);
criterion_main!(benches);
