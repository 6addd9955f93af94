//! OMA-TLV decode and encode speed on two payloads: a Device object instance `/3/0` as real
//! clients send it (≈142 B, lwm2m-device-side.md §3) and a 100-resource instance (a wildcard
//! subscription reporting a whole object). Run with `cargo bench -p devicehub-codec --bench tlv`.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use devicehub_codec::tlv::{self, value, Tlv};

/// `/3/0` with the resources Wakaama's example client reports.
fn device_instance() -> Vec<Tlv> {
    let text = |id: u16, s: &str| Tlv::resource(id, s.as_bytes());
    let ints = |id: u16, values: &[i64]| {
        let instances = values
            .iter()
            .zip(0u16..)
            .map(|(&v, i)| Tlv::resource_instance(i, value::encode_int(v)));
        Tlv::multiple_resource(id, instances.collect())
    };
    vec![Tlv::object_instance(
        0,
        vec![
            text(0, "Open Mobile Alliance"),
            text(1, "Lightweight M2M Client"),
            text(2, "345000123"),
            text(3, "1.0"),
            ints(6, &[1, 5]),
            ints(7, &[3800, 5000]),
            ints(8, &[125, 900]),
            Tlv::resource(9, value::encode_int(100)),
            Tlv::resource(10, value::encode_int(15)),
            ints(11, &[0]),
            Tlv::resource(13, value::encode_time(0x6b03_6a58)),
            text(14, "+01:00"),
            text(15, "Europe/Berlin"),
            text(16, "U"),
        ],
    )]
}

/// One instance with 100 resources: integers, floats and short strings in turn.
fn wide_instance() -> Vec<Tlv> {
    let resources = (0u16..100)
        .map(|i| match i % 3 {
            0 => Tlv::resource(5500 + i, value::encode_int(i64::from(i) * 1000)),
            1 => Tlv::resource(5500 + i, value::encode_float(f64::from(i) + 0.25)),
            _ => Tlv::resource(5500 + i, format!("value-{i}").into_bytes()),
        })
        .collect();
    vec![Tlv::object_instance(0, resources)]
}

fn bench_tlv(c: &mut Criterion) {
    for (name, tree) in [
        ("device_3_0", device_instance()),
        ("instance_100_resources", wide_instance()),
    ] {
        let bytes = tlv::encode(&tree).expect("valid tree");
        let mut group = c.benchmark_group(format!("tlv/{name}"));
        group.throughput(Throughput::Bytes(bytes.len() as u64));
        group.bench_function("decode", |b| b.iter(|| tlv::decode(black_box(&bytes))));
        group.bench_function("encode", |b| b.iter(|| tlv::encode(black_box(&tree))));
        group.finish();
    }
}

criterion_group!(benches, bench_tlv);
criterion_main!(benches);
