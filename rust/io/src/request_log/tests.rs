//! The queue's rules on an in-memory database, and the writer thread on a file.

use super::rules::SCHEMA;
use super::*;
use rusqlite::Connection;

fn row(key: &str, async_id: &str, device: &str) -> Row {
    Row {
        key_id: key.into(),
        async_id: async_id.into(),
        device_id: device.into(),
        data: format!("{key}/{async_id}").into_bytes(),
    }
}

fn memory() -> Connection {
    let db = Connection::open_in_memory().unwrap();
    db.execute_batch(SCHEMA).unwrap();
    db
}

fn values(outcomes: Vec<(u64, Outcome)>) -> Vec<Value> {
    outcomes.into_iter().map(|(_, o)| o.unwrap()).collect()
}

#[test]
fn a_batch_queues_in_order_and_refuses_a_pending_async_id_and_a_full_queue() {
    let mut db = memory();
    let batch = vec![
        (
            1,
            Job::Enqueue {
                row: row("k", "a", "d"),
                max_pending: 2,
            },
        ),
        (
            2,
            Job::Enqueue {
                row: row("k", "a", "d"),
                max_pending: 2,
            },
        ),
        (
            3,
            Job::Enqueue {
                row: row("k", "b", "d"),
                max_pending: 2,
            },
        ),
        (
            4,
            Job::Enqueue {
                row: row("k", "c", "d"),
                max_pending: 2,
            },
        ),
        (
            5,
            Job::Enqueue {
                row: row("k", "c", "e"),
                max_pending: 2,
            },
        ),
        (
            6,
            Job::Pending {
                device_id: "d".into(),
            },
        ),
    ];
    let outcomes = run_batch(&mut db, &batch);
    assert_eq!(
        outcomes.iter().map(|(t, _)| *t).collect::<Vec<_>>(),
        [1, 2, 3, 4, 5, 6]
    );
    assert_eq!(
        values(outcomes),
        [
            Value::Enqueued(Enqueued::Queued),
            Value::Enqueued(Enqueued::Duplicate),
            Value::Enqueued(Enqueued::Queued),
            Value::Enqueued(Enqueued::Full),
            Value::Enqueued(Enqueued::Queued),
            Value::Rows(vec![b"k/a".to_vec(), b"k/b".to_vec()]),
        ]
    );
}

#[test]
fn remove_update_find_count_and_devices_with_pending() {
    let mut db = memory();
    let queue = |r: Row| Job::Enqueue {
        row: r,
        max_pending: 0,
    };
    run_batch(
        &mut db,
        &[
            (1, queue(row("k", "a", "d"))),
            (2, queue(row("k", "b", "e"))),
        ],
    );
    let outcomes = run_batch(
        &mut db,
        &[
            (
                3,
                Job::Update {
                    key_id: "k".into(),
                    async_id: "a".into(),
                    data: b"new".to_vec(),
                },
            ),
            (
                4,
                Job::Find {
                    key_id: "k".into(),
                    async_id: "a".into(),
                },
            ),
            (
                5,
                Job::Remove {
                    key_id: "k".into(),
                    async_id: "b".into(),
                },
            ),
            (
                6,
                Job::Remove {
                    key_id: "k".into(),
                    async_id: "b".into(),
                },
            ),
            (
                7,
                Job::DevicesWithPending {
                    device_ids: vec!["d".into(), "e".into(), "f".into()],
                },
            ),
            (8, Job::Count),
            (
                9,
                Job::Find {
                    key_id: "k".into(),
                    async_id: "b".into(),
                },
            ),
            (
                10,
                Job::RemoveDevice {
                    device_id: "d".into(),
                },
            ),
            (11, Job::All),
        ],
    );
    assert_eq!(
        values(outcomes),
        [
            Value::Done,
            Value::Found(Some(b"new".to_vec())),
            Value::Removed(true),
            Value::Removed(false),
            Value::Devices(vec!["d".into()]),
            Value::Count(1),
            Value::Found(None),
            Value::Done,
            Value::Rows(vec![]),
        ]
    );
}

#[test]
fn a_failing_job_fails_alone_and_the_rest_of_its_batch_stands() {
    let mut db = memory();
    db.execute_batch("CREATE TRIGGER refuse BEFORE INSERT ON requests WHEN NEW.device_id = 'bad' BEGIN SELECT RAISE(ABORT, 'refused'); END;")
        .unwrap();
    let queue = |r: Row| Job::Enqueue {
        row: r,
        max_pending: 0,
    };
    let outcomes = run_batch(
        &mut db,
        &[
            (1, queue(row("k", "a", "d"))),
            (2, queue(row("k", "b", "bad"))),
            (3, queue(row("k", "c", "d"))),
        ],
    );
    assert_eq!(outcomes[0].1, Ok(Value::Enqueued(Enqueued::Queued)));
    assert!(matches!(&outcomes[1].1, Err(StoreError::Sqlite(m)) if m.contains("refused")));
    assert_eq!(outcomes[2].1, Ok(Value::Enqueued(Enqueued::Queued)));
    assert_eq!(
        values(run_batch(&mut db, &[(4, Job::Count)])),
        [Value::Count(2)]
    );
}

#[test]
fn a_full_disk_is_the_disk_fault_of_the_job_that_met_it() {
    let mut db = memory();
    let pages: i64 = db.query_row("PRAGMA page_count", [], |r| r.get(0)).unwrap();
    db.execute_batch(&format!("PRAGMA max_page_count = {}", pages + 2))
        .unwrap();
    let mut big = row("k", "big", "d");
    big.data = vec![0; 64 * 1024];
    let outcomes = run_batch(
        &mut db,
        &[
            (
                1,
                Job::Enqueue {
                    row: row("k", "a", "d"),
                    max_pending: 0,
                },
            ),
            (
                2,
                Job::Enqueue {
                    row: big,
                    max_pending: 0,
                },
            ),
        ],
    );
    assert_eq!(outcomes[0].1, Ok(Value::Enqueued(Enqueued::Queued)));
    assert!(
        matches!(&outcomes[1].1, Err(StoreError::Disk(_))),
        "{:?}",
        outcomes[1].1
    );
}

#[test]
fn import_keeps_the_order_and_skips_what_is_queued() {
    let mut db = memory();
    run_batch(
        &mut db,
        &[(
            1,
            Job::Enqueue {
                row: row("k", "b", "d"),
                max_pending: 0,
            },
        )],
    );
    let rows = vec![row("k", "a", "d"), row("k", "b", "d"), row("k", "c", "d")];
    run_batch(&mut db, &[(2, Job::Import { rows })]);
    assert_eq!(
        values(run_batch(
            &mut db,
            &[(
                3,
                Job::Pending {
                    device_id: "d".into()
                }
            )]
        )),
        [Value::Rows(vec![
            b"k/b".to_vec(),
            b"k/a".to_vec(),
            b"k/c".to_vec()
        ])]
    );
}

#[cfg(target_os = "linux")]
#[test]
fn the_thread_runs_jobs_in_order_wakes_the_taker_and_finishes_what_it_was_given_on_close() {
    let dir = std::env::temp_dir().join(format!("request-log-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("requests.db");
    let _ = std::fs::remove_file(&path);
    let mut log = RequestLog::open(&path).unwrap();
    for i in 0..500u64 {
        log.submit(
            i,
            Job::Enqueue {
                row: row("k", &i.to_string(), "d"),
                max_pending: 0,
            },
        )
        .unwrap();
    }
    log.close();
    assert!(matches!(
        log.submit(999, Job::Count),
        Err(StoreError::Closed)
    ));
    let mut poll = libc::pollfd {
        fd: log.wake_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, no timeout.
    assert_eq!(
        unsafe { libc::poll(&mut poll, 1, 0) },
        1,
        "the outcomes woke the taker"
    );
    let outcomes = log.take();
    assert_eq!(
        outcomes.iter().map(|(t, _)| *t).collect::<Vec<_>>(),
        (0..500).collect::<Vec<_>>()
    );
    assert!(outcomes
        .iter()
        .all(|(_, o)| *o == Ok(Value::Enqueued(Enqueued::Queued))));
    // SAFETY: as above.
    assert_eq!(
        unsafe { libc::poll(&mut poll, 1, 0) },
        0,
        "taking reset the wake-up"
    );
    drop(log);
    let reopened = RequestLog::open(&path).unwrap();
    reopened.submit(1, Job::Count).unwrap();
    let counted = loop {
        let mut poll = libc::pollfd {
            fd: reopened.wake_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: as above; waits for the thread's wake-up, no sleep.
        unsafe { libc::poll(&mut poll, 1, 10_000) };
        let taken = reopened.take();
        if !taken.is_empty() {
            break taken;
        }
    };
    assert_eq!(
        counted,
        [(1, Ok(Value::Count(500)))],
        "committed before close: durable"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
