//! CoAP decode and encode speed on the two messages devicehub handles most: Wakaama's Register
//! (lwm2m-device-side.md §1, ≈190 B, six options) and a NON 2.05 notification with Observe,
//! Content-Format and a TLV payload (§4). Run with `cargo bench -p devicehub-codec --bench coap`.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use devicehub_codec::coap::{self, options, CoapOption, Message, MessageType};

fn register() -> Message {
    let links = "</>;rt=\"oma.lwm2m\";ct=110,</1>;ver=1.1,</1/0>,</2/0>,</3/0>,</4/0>,</5/0>,</6/0>,</7/0>,</31024>;ver=1.0,</31024/10>,</31024/11>,</31024/12>";
    Message {
        mtype: MessageType::Confirmable,
        code: 0x02,
        mid: 0x6d9a,
        token: vec![0x9a, 0x6d, 0x2c, 0x69],
        options: vec![
            CoapOption::new(options::URI_PATH, *b"rd"),
            CoapOption::new(options::CONTENT_FORMAT, [40]),
            CoapOption::new(options::URI_QUERY, *b"lwm2m=1.1"),
            CoapOption::new(options::URI_QUERY, *b"ep=X"),
            CoapOption::new(options::URI_QUERY, *b"b=U"),
            CoapOption::new(options::URI_QUERY, *b"lt=60"),
        ],
        payload: links.as_bytes().to_vec(),
    }
}

fn notification() -> Message {
    Message {
        mtype: MessageType::NonConfirmable,
        code: 0x45,
        mid: 0x1234,
        token: vec![0x9a, 0x6d, 0x2c, 0x69],
        options: vec![
            CoapOption::new(options::OBSERVE, options::encode_uint(4711)),
            CoapOption::new(options::CONTENT_FORMAT, options::encode_uint(11542)),
        ],
        payload: vec![
            0x08, 0x0a, 0x0b, 0xc1, 0x01, 0x14, 0xc4, 0x03, 0xc1, 0xf0, 0x00, 0x00, 0xc0, 0x05,
        ],
    }
}

fn bench_coap(c: &mut Criterion) {
    for (name, message) in [("register", register()), ("notification", notification())] {
        let bytes = coap::encode(&message).expect("valid message");
        let mut group = c.benchmark_group(format!("coap/{name}"));
        group.throughput(Throughput::Bytes(bytes.len() as u64));
        group.bench_function("decode", |b| b.iter(|| coap::decode(black_box(&bytes))));
        group.bench_function("encode", |b| b.iter(|| coap::encode(black_box(&message))));
        group.finish();
    }
}

criterion_group!(benches, bench_coap);
criterion_main!(benches);
