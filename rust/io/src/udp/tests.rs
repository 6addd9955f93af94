//! Batched sends and receives on real loopback sockets.

use super::*;
use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::time::Duration;

fn pair() -> (UdpSocket, UdpSocket) {
    let a = UdpSocket::bind("127.0.0.1:0").unwrap();
    let b = UdpSocket::bind("127.0.0.1:0").unwrap();
    b.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    (a, b)
}

#[test]
fn send_batch_delivers_every_datagram_in_order_to_its_destination() {
    let (a, b) = pair();
    let c = UdpSocket::bind("127.0.0.1:0").unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let payloads: Vec<Vec<u8>> = (0u16..300).map(|i| i.to_be_bytes().to_vec()).collect();
    let (to_b, to_c) = (b.local_addr().unwrap(), c.local_addr().unwrap());
    let batch: Vec<(&[u8], SocketAddr)> = payloads
        .iter()
        .enumerate()
        .map(|(i, p)| (p.as_slice(), if i % 2 == 0 { to_b } else { to_c }))
        .collect();
    assert_eq!(send_batch(a.as_raw_fd(), &batch).unwrap(), 300);
    let mut buf = [0u8; 16];
    for (socket, parity) in [(&b, 0u16), (&c, 1)] {
        for i in (0u16..300).filter(|i| i % 2 == parity) {
            let (n, from) = socket.recv_from(&mut buf).unwrap();
            assert_eq!(&buf[..n], &i.to_be_bytes());
            assert_eq!(from, a.local_addr().unwrap());
        }
    }
}

#[test]
fn send_batch_of_nothing_sends_nothing() {
    let (a, _) = pair();
    assert_eq!(send_batch(a.as_raw_fd(), &[]).unwrap(), 0);
}

#[test]
fn send_batch_over_ipv6_loopback() {
    let Ok(a) = UdpSocket::bind("[::1]:0") else {
        return; // no IPv6 on this host
    };
    let b = UdpSocket::bind("[::1]:0").unwrap();
    b.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let to = b.local_addr().unwrap();
    assert_eq!(
        send_batch(a.as_raw_fd(), &[(b"\x60\x00\x12\x34", to)]).unwrap(),
        1
    );
    let mut buf = [0u8; 8];
    let (n, from) = b.recv_from(&mut buf).unwrap();
    assert_eq!(
        (&buf[..n], from),
        (&b"\x60\x00\x12\x34"[..], a.local_addr().unwrap())
    );
}

#[test]
fn recv_batch_takes_every_waiting_datagram_with_its_sender() {
    let (a, b) = pair();
    let to = b.local_addr().unwrap();
    for i in 0u8..50 {
        a.send_to(&[i; 3], to).unwrap();
    }
    let mut got = Vec::new();
    // loopback delivery is synchronous, yet read until all are in rather than count on it
    for _ in 0..1000 {
        got.extend(recv_batch(b.as_raw_fd(), 32, 1153).unwrap());
        if got.len() == 50 {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(got.len(), 50);
    for (i, (data, from)) in got.iter().enumerate() {
        assert_eq!(data, &vec![i as u8; 3]);
        assert_eq!(*from, a.local_addr().unwrap());
    }
}

#[test]
fn recv_batch_on_an_empty_socket_is_empty_not_blocking() {
    let (_, b) = pair();
    assert!(recv_batch(b.as_raw_fd(), 8, 64).unwrap().is_empty());
}

#[test]
fn recv_batch_cuts_a_datagram_longer_than_its_buffer() {
    let (a, b) = pair();
    a.send_to(&[7u8; 100], b.local_addr().unwrap()).unwrap();
    let mut got = Vec::new();
    for _ in 0..1000 {
        got = recv_batch(b.as_raw_fd(), 4, 10).unwrap();
        if !got.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(got[0].0, vec![7u8; 10]);
}

#[test]
fn send_batch_on_a_closed_descriptor_is_an_error() {
    let to: SocketAddr = "127.0.0.1:9".parse().unwrap();
    assert!(send_batch(-1, &[(b"x", to)]).is_err());
}

#[test]
fn receiver_is_reused_and_keeps_only_the_last_batch() {
    let (a, b) = pair();
    let to = b.local_addr().unwrap();
    let mut receiver = Receiver::new(4, 64);
    for round in 0u8..3 {
        for i in 0u8..6 {
            a.send_to(&[round, i], to).unwrap();
        }
        let mut got = Vec::new();
        for _ in 0..1000 {
            let n = receiver.receive(b.as_raw_fd()).unwrap();
            assert!(n <= receiver.capacity());
            got.extend(receiver.datagrams().map(|(d, from)| (d.to_vec(), from)));
            if got.len() == 6 {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let expected: Vec<(Vec<u8>, SocketAddr)> = (0u8..6)
            .map(|i| (vec![round, i], a.local_addr().unwrap()))
            .collect();
        assert_eq!(got, expected);
    }
    assert_eq!(receiver.receive(b.as_raw_fd()).unwrap(), 0);
    assert!(receiver.get(0).is_none());
}

#[test]
fn receiver_reports_a_queued_icmp_error_and_goes_on_reading() {
    let (a, b) = pair();
    let on = 1 as libc::c_int;
    // SAFETY: a valid socket and option value of the right size.
    let set = unsafe {
        libc::setsockopt(
            b.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_RECVERR,
            &on as *const _ as *const libc::c_void,
            mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(set, 0);
    let closed = UdpSocket::bind("127.0.0.1:0").unwrap();
    let nobody = closed.local_addr().unwrap();
    drop(closed);
    b.send_to(b"hello?", nobody).unwrap(); // answered by ICMP port unreachable
    let mut receiver = Receiver::new(4, 64);
    let mut refused = false;
    for _ in 0..1000 {
        match receiver.receive(b.as_raw_fd()) {
            Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => {
                refused = true;
                break;
            }
            Err(e) => panic!("{e}"),
            Ok(_) => std::thread::sleep(Duration::from_millis(1)),
        }
    }
    assert!(refused);
    a.send_to(b"after", b.local_addr().unwrap()).unwrap();
    let mut got = Vec::new();
    for _ in 0..1000 {
        receiver.receive(b.as_raw_fd()).unwrap();
        got.extend(receiver.datagrams().map(|(d, _)| d.to_vec()));
        if !got.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(got, vec![b"after".to_vec()]);
}
